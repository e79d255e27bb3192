#!/bin/sh
# funclen.sh: C functions in src/ and Lua functions in lua/gt/ longer than a
# screen (default 60 lines, from the line that opens the body to the closing brace).
#   sh scripts/check/funclen.sh [max] [files...]
# Relies on the house layout: a definition starts at column 0 and its body
# ends with a "}" alone at column 0.  Exits non-zero when one is too long.
max=${1:-60}
[ $# -gt 0 ] && shift
cd "$(dirname "$0")/../.."
[ $# -gt 0 ] || set -- src/*.c
awk -v max="$max" '
  FNR == 1 { in_fn = 0 }
  !in_fn && /^[A-Za-z_].*[)] *[{] *$/ && !/^(typedef|struct|enum|union)/ { in_fn = 1; start = FNR; name = $0; next }
  !in_fn && /^[A-Za-z_][^;]*[(][^;]*$/ && !/^(typedef|struct|enum|union|#)/ { pend = $0; pstart = FNR; next }
  !in_fn && pend != "" && /[)] *[{] *$/ { in_fn = 1; start = pstart; name = pend; pend = ""; next }
  !in_fn && pend != "" && /;/ { pend = "" }
  in_fn && /^}/ { n = FNR - start + 1; in_fn = 0
    if (n > max) { sub(/[(].*/, "", name); sub(/.*[ *]/, "", name); printf "%s:%d: %s is %d lines (max %d)\n", FILENAME, start, name, n, max; bad = 1 } }
  END { exit bad }' "$@" && echo "funclen.sh: no C function over $max lines ($# files)"
c_rc=$?
# Lua functions in lua/gt/: LuaJIT's bytecode listing gives each function's
# first and last line (the file's main chunk, line 0, is not a function).
lua_rc=0
if command -v luajit >/dev/null 2>&1; then
  for f in lua/gt/*.lua lua/gt/*/*.lua; do
    luajit -bl "$f" 2>/dev/null | sed -n 's/.*-- BYTECODE -- .*:\([0-9]*\)-\([0-9]*\)$/\1 \2/p' |
      awk -v f="$f" -v max="$max" '$1 > 0 && $2 - $1 + 1 > max { printf "%s:%d: a function of %d lines (max %d)\n", f, $1, $2 - $1 + 1, max; bad = 1 } END { exit bad }' || lua_rc=1
  done
  [ "$lua_rc" = 0 ] && echo "funclen.sh: no Lua function over $max lines in lua/gt/"
fi
[ "$c_rc" = 0 ] && [ "$lua_rc" = 0 ]
