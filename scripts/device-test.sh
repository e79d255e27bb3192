#!/bin/sh
# device-test.sh: prepares a GPU run of the whole spec suite and prints the
# command to send to the GPU machine (the device tool: carry build and .devlua).
#   sh scripts/device-test.sh            # build here, bundle Busted, print the command
# The GPU machine has no package registry: LuaJIT and libedit are linked into
# the binary; the few shared libraries it still needs travel in build/lib.
set -eu
cd "$(dirname "$0")/.."
make -s all build/gtlua-test
mkdir -p build/lib
for l in libbsd.so.0 libmd.so.0 libtinfo.so.6; do
  p=$(ldconfig -p | awk -v l="$l" '$1 == l && /x86-64/ { print $NF; exit }')
  [ -n "$p" ] && cp -L "$p" build/lib/
done
shared=$(cd .. && pwd)/shared/device/bundle-lua.sh
sh "$shared" .devlua >/dev/null
cat <<'CMD'
carry: ["build", ".devlua"]
command:
d=$PWD/.devlua; export LUA_PATH="$d/share/?.lua;$d/share/?/init.lua;;" LUA_CPATH="$d/lib/?.so;;" BUSTED=$d/bin/busted GTLUA_BUSTED=$d/bin/busted GTLUA_CACHE=/tmp/gtlua-cache GTLUA_BACKEND=cuda; nvidia-smi -L; sh scripts/test.sh 2>&1 | tee $OUT/cuda-test.log
CMD
