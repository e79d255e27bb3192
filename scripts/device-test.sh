#!/bin/sh
# device-test.sh: prepares a GPU run of the whole spec suite and prints the
# command to send to the GPU machine (the device tool: carry build and .devlua).
#   sh scripts/device-test.sh            # build here, bundle Busted, print the command
#   sh scripts/device-test.sh memcheck   # the suite under compute-sanitizer memcheck
#   sh scripts/device-test.sh racecheck  # ... racecheck (synccheck, initcheck also work)
#   sh scripts/device-test.sh bench      # the suite, then make bench, in one call (about 5.5 minutes):
#                                        # everything comes back as bench.tgz (the device returns 8 files
#                                        # at most); then build/gtlua scripts/bench/report.lua DIR --out
#                                        # scripts/bench/RESULTS.md --svg scripts/bench/steps.svg here
#   sh scripts/device-test.sh ab OLD     # scripts/bench/ab.sh against the build in OLD: its lua/,
#                                        # kernels/, build/gtlua and build/lib (cp -r build/lib) in a
#                                        # folder inside this checkout that git ignores, e.g. .abold
# The sanitizer modes run scripts/sanitize.sh there (one process per spec file,
# options and their reasons at its top); SPECS="spec/x_spec.lua ..." before the
# command picks files, e.g. the ones a run left for lack of time.
# The GPU machine has no package registry: LuaJIT and libedit are linked into
# the binary; the few shared libraries it still needs travel in build/lib.
set -eu
cd "$(dirname "$0")/.."
mode=${1:-suite}
case "$mode" in
  suite|bench|ab|memcheck|racecheck|synccheck|initcheck) ;;
  *) echo "usage: sh scripts/device-test.sh [bench|ab OLD|memcheck|racecheck|synccheck|initcheck]" >&2; exit 2 ;;
esac
make -s all build/gtlua-test
mkdir -p build/lib
for l in libbsd.so.0 libmd.so.0 libtinfo.so.6; do
  p=$(ldconfig -p | awk -v l="$l" '$1 == l && /x86-64/ { print $NF; exit }')
  [ -n "$p" ] && cp -L "$p" build/lib/
done
shared=$(cd .. && pwd)/shared/device/bundle-lua.sh
sh "$shared" .devlua >/dev/null
# LuaJIT's own jit.* modules (jit.v, jit.dump, jit.p: scripts/bench/probes/traces.sh) travel too
for j in /usr/share/luajit-2.1*/jit; do [ -d "$j" ] && mkdir -p .devlua/share && cp -r "$j" .devlua/share/; done
env='d=$PWD/.devlua; export LUA_PATH="$d/share/?.lua;$d/share/?/init.lua;;" LUA_CPATH="$d/lib/?.so;;" BUSTED=$d/bin/busted GTLUA_BUSTED=$d/bin/busted GTLUA_CACHE=/tmp/gtlua-cache GTLUA_BACKEND=cuda; nvidia-smi -L'
if [ "$mode" = bench ] || [ "$mode" = ab ]; then   # the anchors' raw launch floor travels in .anchors
  mkdir -p .anchors && cp -r ../shared/anchors/* .anchors/ 2>/dev/null
fi
case "$mode" in
  suite) echo 'carry: ["build", ".devlua"]' ;;
  bench) echo 'carry: ["build", ".devlua", ".anchors"]' ;;
  ab) echo "carry: [\"build\", \".devlua\", \"${2:?ab needs the old checkout, e.g. .abold}\"]" ;;
  *) echo 'carry: ["build", ".devlua"]' ;;
esac
echo 'command:'
if [ "$mode" = suite ]; then
  echo "$env; sh scripts/test.sh 2>&1 | tee \$OUT/cuda-test.log"
elif [ "$mode" = bench ]; then
  echo "$env; mkdir -p /tmp/b; sh scripts/test.sh > /tmp/b/cuda-test.log 2>&1; tail -2 /tmp/b/cuda-test.log;" \
    "o=\$OUT; OUT=/tmp/b T_GTLUA=150 T_TORCH=300 T_NVCC=40 T_FLOOR=30 timeout 480 sh scripts/bench/run.sh > /tmp/b/bench.log 2>&1;" \
    "cd /tmp/b && tar czf \$o/bench.tgz *.json *.txt cpus.cal *.log RESULTS.md 2>/dev/null; grep '^\[bench' bench.log"
elif [ "$mode" = ab ]; then
  echo "$env; timeout 420 sh scripts/bench/ab.sh \$PWD/$2 chain,grow-128,grow-512 5 2>&1 | tee \$OUT/ab.txt"
else
  echo "$env; sh scripts/sanitize.sh $mode 2>&1 | tee \$OUT/$mode.log"
fi
