#!/bin/sh
# cpus.sh CAL: the quickest quarter of this machine's cores, as "0,3,..." on
# stdout (nothing below four cores, or without taskset).  Each core's graph
# launch is timed by cpu_probe.lua ("ns core" per line into CAL).  On a
# shared GPU host some cores run everything, the pure-C floor included, two
# to four times slower than the others; run.sh and ab.sh pin every measured
# process to these.
set -u
cd "$(dirname "$0")/../.." || exit 1
BIN=${GTLUA_BIN:-build/gtlua}
cal=${1:?usage: sh scripts/bench/cpus.sh CALIBRATION_FILE}
command -v taskset >/dev/null 2>&1 || exit 0
n=$(nproc 2>/dev/null || echo 1)
[ "$n" -ge 4 ] || exit 0
c=0
while [ "$c" -lt "$n" ]; do      # "ns cpu" per line
  t=$(timeout 30 taskset -c "$c" "$BIN" scripts/bench/cpu_probe.lua 2>/dev/null) || t=999999999
  echo "${t:-999999999} $c"; c=$((c + 1))
done > "$cal"
sort -n "$cal" | head -n "$((n / 4))" | awk '{ print $2 }' | sort -n | paste -sd, -
