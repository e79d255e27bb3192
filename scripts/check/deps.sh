#!/bin/sh
# deps.sh: the dependencies between the files of src/, and whether they form a cycle.
#   sh scripts/check/deps.sh [-v] [build dir]     (default build: make builds its objects)
# Calls: for every object, the symbols it uses (nm: U) that another src/ file
# defines, as "caller -> callee: symbols"; and the calls made by the static
# inline functions of src/ headers, charged to every file that uses one
# (their calls leave no symbol in the caller's object, so they are read from
# the headers' text, through inline functions that call inline functions).
# Includes: src/ headers included by src/ files.  Both graphs go through
# tsort, which reports any loop; the script exits non-zero when there is one.
# Calls through the backend's function pointers are the interface, not edges.
# Prints one line when there is no cycle; -v lists every edge and the layers.
set -u
cd "$(dirname "$0")/../.."
verbose=0
[ "${1:-}" = -v ] && { verbose=1; shift; }
OBJ=${1:-build}/obj
[ -d "$OBJ" ] || { echo "deps.sh: no $OBJ (run make first)"; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in src/*.c; do
  o=$OBJ/$(basename "$f" .c).o
  [ -f "$o" ] || { echo "deps.sh: $o is missing (run make)"; exit 2; }
  nm "$o" | awk -v f="$(basename "$f" .c)" '$1 == "U" { print f, "use", $2 } NF == 3 && $2 ~ /^[TDBR]$/ { print f, "def", $3 }'
done > "$tmp/syms"

# Inline functions of the headers: "name callee" for each call in a body.
awk '
  function flush(   s, id) {
    s = body
    while (match(s, /[A-Za-z_][A-Za-z_0-9]*[ \t]*\(/)) {
      id = substr(s, RSTART, RLENGTH); sub(/[ \t]*\($/, "", id)
      if (id != name) print name, id
      s = substr(s, RSTART + RLENGTH)
    }
  }
  !on && /^static inline/ { on = 1; body = ""; name = ""; depth = 0; seen = 0 }
  on {
    line = $0
    if (name == "" && match(line, /[A-Za-z_][A-Za-z_0-9]*[ \t]*\(/)) {
      pre = substr(line, 1, RSTART + RLENGTH - 1)
      name = substr(pre, RSTART, RLENGTH); sub(/[ \t]*\($/, "", name)
      line = substr(line, length(pre) + 1)
    }
    body = body " " line
    n = gsub(/\{/, "{", $0); m = gsub(/\}/, "}", $0)
    if (n) seen = 1
    depth += n - m
    if (seen && depth <= 0) { flush(); on = 0 }
  }' src/*.h | sort -u > "$tmp/inl"
# Uses of each inline function, by file: "file name".
awk '{ print $1 }' "$tmp/inl" | sort -u > "$tmp/inames"
for f in src/*.c; do
  grep -ow -F -f "$tmp/inames" "$f" 2>/dev/null | sort -u | sed "s|^|$(basename "$f" .c) |"
done > "$tmp/iuse"
# The symbols each file reaches through the inline functions it uses (closure over inline-calls-inline).
awk 'FNR == NR { c[$1] = c[$1] " " $2; isinl[$1] = 1; next }
     { f = $1; todo[1] = $2; nt = 1; delete seen
       while (nt > 0) { x = todo[nt--]; if (x in seen) continue; seen[x] = 1
         k = split(c[x], cs, " ")
         for (i = 1; i <= k; i++) { if (cs[i] in isinl) todo[++nt] = cs[i]; else print f, "use", cs[i] } } }' \
  "$tmp/inl" "$tmp/iuse" | sort -u >> "$tmp/syms"

awk '$2 == "def" { def[$3] = $1 } $2 == "use" { use[++n] = $1 " " $3 }
     END { for (i = 1; i <= n; i++) { split(use[i], u, " "); d = def[u[2]]
             if (d != "" && d != u[1]) print u[1], d, u[2] } }' "$tmp/syms" |
  sort -u | awk '{ k = $1 " -> " $2; s[k] = s[k] " " $3 } END { for (k in s) print k ":" s[k] }' | sort > "$tmp/calls"
awk '{ print $1, $3 }' "$tmp/calls" | tr -d ':' > "$tmp/cedges"
for f in src/*.c src/*.h; do
  sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f" | while read -r h; do
    [ -f "src/$h" ] && echo "$(basename "$f") $h"
  done
done > "$tmp/iedges"
if [ $verbose = 1 ]; then
  echo "calls between files (caller -> callee: symbols; inline functions' calls included):"
  sed 's/^/  /' "$tmp/calls"
fi
rc=0
for g in cedges iedges; do
  # tsort lists the files bottom-up (a file after everything it uses) and names the files of any loop.
  if ! tsort "$tmp/$g" > "$tmp/order" 2> "$tmp/err" || [ -s "$tmp/err" ]; then
    what=calls; [ "$g" = iedges ] && what=includes
    sed -n 's/^tsort: *//p' "$tmp/err" | grep -v ':' | sort -u > "$tmp/loop"
    echo "deps.sh: the $what between these files of src/ form a loop: $(tr '\n' ' ' < "$tmp/loop")"
    # the edges among them, to say which calls close it
    [ "$g" = cedges ] && tr -d ':' < "$tmp/calls" | awk 'FNR == NR { in_loop[$1] = 1; next } ($1 in in_loop) && ($3 in in_loop)' \
      "$tmp/loop" - | awk '{ printf "  %s -> %s:", $1, $3; for (i = 4; i <= NF; i++) printf " %s", $i; print "" }'
    rc=1
  fi
done
[ $rc = 0 ] && echo "deps.sh: no cycles: calls (inline functions' included) and includes go one way"
[ $verbose = 1 ] && echo "layers, callers first: $(tsort "$tmp/cedges" 2>/dev/null | tr '\n' ' ')"
exit $rc
