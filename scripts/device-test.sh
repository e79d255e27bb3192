#!/bin/sh
# device-test.sh: prepares a GPU run of the whole spec suite and prints the
# command to send to the GPU machine (the device tool: carry build and .devlua).
#   sh scripts/device-test.sh            # build here, bundle Busted, print the command
#   sh scripts/device-test.sh memcheck   # the suite under compute-sanitizer memcheck
#   sh scripts/device-test.sh racecheck  # ... racecheck (synccheck, initcheck also work)
# The sanitizer modes run scripts/sanitize.sh there (one process per spec file,
# options and their reasons at its top); SPECS="spec/x_spec.lua ..." before the
# command picks files, e.g. the ones a run left for lack of time.
# The GPU machine has no package registry: LuaJIT and libedit are linked into
# the binary; the few shared libraries it still needs travel in build/lib.
set -eu
cd "$(dirname "$0")/.."
mode=${1:-suite}
case "$mode" in
  suite|memcheck|racecheck|synccheck|initcheck) ;;
  *) echo "usage: sh scripts/device-test.sh [memcheck|racecheck|synccheck|initcheck]" >&2; exit 2 ;;
esac
make -s all build/gtlua-test
mkdir -p build/lib
for l in libbsd.so.0 libmd.so.0 libtinfo.so.6; do
  p=$(ldconfig -p | awk -v l="$l" '$1 == l && /x86-64/ { print $NF; exit }')
  [ -n "$p" ] && cp -L "$p" build/lib/
done
shared=$(cd .. && pwd)/shared/device/bundle-lua.sh
sh "$shared" .devlua >/dev/null
# LuaJIT's own jit.* modules (jit.v, jit.dump, jit.p: scripts/bench/traces.sh) travel too
for j in /usr/share/luajit-2.1*/jit; do [ -d "$j" ] && mkdir -p .devlua/share && cp -r "$j" .devlua/share/; done
env='d=$PWD/.devlua; export LUA_PATH="$d/share/?.lua;$d/share/?/init.lua;;" LUA_CPATH="$d/lib/?.so;;" BUSTED=$d/bin/busted GTLUA_BUSTED=$d/bin/busted GTLUA_CACHE=/tmp/gtlua-cache GTLUA_BACKEND=cuda; nvidia-smi -L'
echo 'carry: ["build", ".devlua"]'
echo 'command:'
if [ "$mode" = suite ]; then
  echo "$env; sh scripts/test.sh 2>&1 | tee \$OUT/cuda-test.log"
else
  echo "$env; sh scripts/sanitize.sh $mode 2>&1 | tee \$OUT/$mode.log"
fi
