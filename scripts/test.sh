#!/bin/sh
# test.sh: the structure checks (scripts/check/: no dependency cycle between
# src/ files, no function over 60 lines; each one item, its output shown only
# when it fails), the C unit tests (tests/c/), then the Busted specs inside
# gtlua (a task of .busted); prints one closing line "N passed, N failed" and
# fails when anything failed.
#   GTLUA_BACKEND=cpu|cuda picks the backend (auto by default): cpu runs the
#     task `default`, cuda the task `gpu` (the #gpu specs too);
#   TEST_BROWSER=1 adds the #browser specs; BUSTED_ARGS adds Busted options
#     (e.g. --tags=tree, or --run=slow);
#   BUSTED names the busted script (default: busted on the PATH).
# Busted reports in TAP (one "ok N - name" or "not ok N - name" line a spec,
# then the plan "1..N"); a run without its plan line crashed, and counts as a failure.
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

# The structure checks: one item each.
spass=0 sfail=0
for c in "deps.sh $(dirname "$BIN")" "funclen.sh"; do
  # shellcheck disable=SC2086
  if sh scripts/check/$c > "$out" 2>&1; then spass=$((spass + 1)); else sfail=$((sfail + 1)); cat "$out"; fi
done
echo "structure checks: $spass passed, $sfail failed"

# The C tests end with the line "C tests: N passed, M failed".
cpass=0 cfail=1
if [ -x "$TESTBIN" ]; then
  "$TESTBIN" 2>&1 | tee "$out"
  set -- $(awk '/^C tests:/ { p = $3; f = $5 } END { print (p == "" ? 0 : p), (f == "" ? 1 : f) }' "$out")
  cpass=$1 cfail=$2
else
  echo "C tests: $TESTBIN is missing (make builds it)"
fi

echo "backend: $backend (.busted task: $task${exclude:+, $exclude})"
# shellcheck disable=SC2086
$BIN "$BUSTED" --run="$task" $exclude --output=TAP ${BUSTED_ARGS:-} 2>&1 | tee "$out"
set -- $(awk '/^ok [0-9]+ - # SKIP/ { s++; next } /^ok [0-9]/ { p++ } /^not ok [0-9]/ { f++ }
              /^1\.\.[0-9]+$/ { plan = 1 } END { print p + 0, f + 0, s + 0, plan + 0 }' "$out")
ok=$1 bad=$2 pending=$3
if [ "$4" = 0 ]; then bad=$((bad + 1)); echo "busted ended without its TAP plan line (it crashed?)"; fi
echo "specs: $ok passed, $bad failed, $pending pending"
echo "$((spass + cpass + ok)) passed, $((sfail + cfail + bad)) failed"
[ $((sfail + cfail + bad)) -eq 0 ]
