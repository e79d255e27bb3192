#!/bin/sh
# test.sh: the structure checks (scripts/check/: no dependency cycle between
# src/ files, no function over 60 lines; each one item), the C unit tests
# (tests/c/), then the Busted specs inside gtlua (a task of .busted).  It
# prints only what needs a look: each failure (a structure check's output,
# the C tests' failing checks, a failed spec with where and its message),
# each skipped spec with its reason, and one closing line "N passed, N
# failed" (all of them together); it fails when anything failed.
#   GTLUA_BACKEND=cpu|cuda picks the backend (auto by default): cpu runs the
#     task `default`, cuda the task `gpu` (the #gpu specs too);
#   TEST_BROWSER=1 adds the #browser specs; BUSTED_ARGS adds Busted options
#     (e.g. --tags=tree, or --run=slow) or spec files;
#   BUSTED names the busted script (default: busted on the PATH).
# Busted reports in TAP through scripts/tap.lua (one "ok N - name" or "not ok
# N - name" line a spec, "ok N - # SKIP name: reason" for a skipped one, then
# the plan "1..N"); a run without its plan line crashed: its last lines are
# shown and it counts as a failure, as do C tests that end without their
# "C tests: N passed, M failed" line.
set -u
cd "$(dirname "$0")/.."
BIN=${GTLUA_BIN_UNDER_TEST:-build/gtlua}
TESTBIN=${GTLUA_TEST_BIN:-$(dirname "$BIN")/gtlua-test}   # the C tests of the same build
BUSTED=${BUSTED:-$(command -v busted || echo /usr/bin/busted)}
backend=$($BIN -e 'io.write(gt.backend())' 2>/dev/null || echo none)
task=default
[ "$backend" = cuda ] && task=gpu
exclude=
if [ "${TEST_BROWSER:-0}" = 1 ]; then
  exclude="--exclude-tags=slow"
  [ "$backend" = cuda ] || exclude="--exclude-tags=gpu,slow"
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# The structure checks: one item each, their output shown only when they fail.
spass=0 sfail=0
for c in "deps.sh $(dirname "$BIN")" "funclen.sh"; do
  # shellcheck disable=SC2086
  if sh scripts/check/$c > "$out" 2>&1; then spass=$((spass + 1)); else sfail=$((sfail + 1)); cat "$out"; fi
done

# The C tests print their failing checks, then "C tests: N passed, M failed".
cpass=0 cfail=1
if [ -x "$TESTBIN" ]; then
  "$TESTBIN" > "$out" 2>&1
  set -- $(awk 'match($0, /C tests: [0-9]+ passed, [0-9]+ failed/) { split(substr($0, RSTART, RLENGTH), w, " ");
                  p = w[3]; f = w[5] }
                END { print (p == "" ? 0 : p), (f == "" ? 1 : f), (p == "" ? 0 : 1) }' "$out")
  cpass=$1 cfail=$2
  if [ "$3" = 0 ]; then
    tail -n 40 "$out"
    echo "C tests: $TESTBIN ended without its summary line (it crashed?)"
  elif [ "$cfail" != 0 ]; then
    sed 's/C tests: [0-9]* passed, [0-9]* failed//' "$out" | grep -v '^$'
  fi
else
  echo "C tests: $TESTBIN is missing (make builds it)"
fi

# shellcheck disable=SC2086
$BIN "$BUSTED" --run="$task" $exclude --output=scripts/tap.lua ${BUSTED_ARGS:-} > "$out" 2>&1
# failures with their "# " lines, and skips
awk '/^not ok [0-9]+ - / { shown = 1; print; next }
     shown && /^# / { print; next }
     { shown = 0 }
     /^ok [0-9]+ - # SKIP / { sub(/^ok [0-9]+ - # SKIP /, "skipped: "); print }' "$out"
set -- $(awk '/^ok [0-9]+ - # SKIP / { s++; next } /^ok [0-9]+ - / { p++ } /^not ok [0-9]+ - / { f++ }
              /^1\.\.[0-9]+$/ { plan = 1 } END { print p + 0, f + 0, s + 0, plan + 0 }' "$out")
ok=$1 bad=$2
if [ "$4" = 0 ]; then            # what it printed after its last result (at most 40 lines), then the verdict
  bad=$((bad + 1))
  awk '/^(not )?ok [0-9]+ - / { n = 0; inres = 1; next } inres && /^# / { next } { inres = 0; l[++n] = $0 }
       END { for (i = (n > 40 ? n - 39 : 1); i <= n; i++) print l[i] }' "$out"
  echo "busted ended without its TAP plan line (it crashed?)"
fi
echo "$((spass + cpass + ok)) passed, $((sfail + cfail + bad)) failed"
[ $((sfail + cfail + bad)) -eq 0 ]
