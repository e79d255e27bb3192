#!/bin/sh
# deps.sh: the dependencies between the files of src/, and whether they form a cycle.
#   sh scripts/deps.sh [build dir]     (default build: make builds its objects)
# Calls: for every object, the symbols it uses (nm: U) that another src/ file
# defines, as "caller -> callee: symbols".  Includes: src/ headers included by
# src/ files.  Both graphs go through tsort, which reports any loop; the
# script exits non-zero when there is one.  (Calls through the backend's
# function pointers are the interface, not edges; main.c's test main, which
# calls every gt_test_*, is left out.)
set -u
cd "$(dirname "$0")/.."
OBJ=${1:-build}/obj
[ -d "$OBJ" ] || { echo "deps.sh: no $OBJ (run make first)"; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in src/*.c; do
  o=$OBJ/$(basename "$f" .c).o
  [ -f "$o" ] || { echo "deps.sh: $o is missing (run make)"; exit 2; }
  nm "$o" | awk -v f="$(basename "$f" .c)" '$1 == "U" { print f, "use", $2 } NF == 3 && $2 ~ /^[TDBR]$/ { print f, "def", $3 }'
done > "$tmp/syms"
awk '$2 == "def" { def[$3] = $1 } $2 == "use" { use[++n] = $1 " " $3 }
     END { for (i = 1; i <= n; i++) { split(use[i], u, " "); d = def[u[2]]
             if (d != "" && d != u[1] && u[2] !~ /^gt_test_/) print u[1], d, u[2] } }' "$tmp/syms" |
  sort | awk '{ k = $1 " -> " $2; s[k] = s[k] " " $3 } END { for (k in s) print k ":" s[k] }' | sort > "$tmp/calls"
echo "calls between files (caller -> callee: symbols):"
sed 's/^/  /' "$tmp/calls"
awk '{ print $1, $3 }' "$tmp/calls" | tr -d ':' > "$tmp/cedges"
for f in src/*.c src/*.h; do
  sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f" | while read -r h; do
    [ -f "src/$h" ] && echo "$(basename "$f") $h"
  done
done > "$tmp/iedges"
rc=0
for g in cedges iedges; do
  # tsort lists the files bottom-up (a file after everything it uses) and names any loop.
  if ! tsort "$tmp/$g" > "$tmp/order" 2> "$tmp/err" || [ -s "$tmp/err" ]; then
    echo "cycle in the ${g#?} graph:"; sed 's/^/  /' "$tmp/err"; rc=1
  fi
done
[ $rc = 0 ] && echo "no cycles: calls and includes go one way"
echo "layers, callers first: $(tsort "$tmp/cedges" 2>/dev/null | tr '\n' ' ')"
exit $rc
