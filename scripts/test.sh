#!/bin/sh
# test.sh: the C unit tests, then every Busted spec inside gtlua; prints one
# closing line "N passed, N failed" and fails when anything failed.
#   GTLUA_BACKEND=cpu|cuda picks the backend (auto by default);
#   BUSTED_ARGS adds Busted options (e.g. --tags=tree).
# Specs tagged #gpu run only on cuda, #browser only with TEST_BROWSER=1.
set -u
cd "$(dirname "$0")/.."
BIN=${GTLUA_BIN_UNDER_TEST:-build/gtlua}
TESTBIN=${GTLUA_TEST_BIN:-$(dirname "$BIN")/gtlua-test}   # the C tests of the same build
BUSTED=${BUSTED:-$(command -v busted || echo /usr/bin/busted)}
backend=$($BIN -e 'io.write(gt.backend())' 2>/dev/null || echo none)
tags="browser"
[ "$backend" = cuda ] || tags="$tags,gpu"
[ "${TEST_BROWSER:-0}" = 1 ] && tags=$(echo "$tags" | sed 's/browser,\{0,1\}//')
out=$(mktemp)
trap 'rm -f "$out"' EXIT

cpass=0 cfail=1
if [ -x "$TESTBIN" ]; then
  "$TESTBIN" 2>&1 | tee "$out"
  line=$(grep '^C tests:' "$out" | tail -1)
  cpass=$(echo "$line" | sed -n 's/.* \([0-9]*\) passed.*/\1/p')
  cfail=$(echo "$line" | sed -n 's/.* \([0-9]*\) failed.*/\1/p')
  [ -n "$cpass" ] || cpass=0
  [ -n "$cfail" ] || cfail=1
else
  echo "C tests: $TESTBIN is missing (make builds it)"
fi

echo "backend: $backend (excluding tags: ${tags:-none})"
# shellcheck disable=SC2086
$BIN "$BUSTED" --exclude-tags="$tags" ${BUSTED_ARGS:-} spec/ 2>&1 | tee "$out"
summary=$(grep -E '[0-9]+ success(es)? / [0-9]+ failures? / [0-9]+ errors?' "$out" | tail -1)
ok=$(echo "$summary" | sed -n 's/^\([0-9]*\) success.*/\1/p')
bad=$(echo "$summary" | sed -n 's/.* \([0-9]*\) failures\{0,1\} \/ \([0-9]*\) errors\{0,1\}.*/\1 \2/p')
if [ -z "$ok" ]; then ok=0; bad="1 0"; echo "busted printed no summary (it crashed?)"; fi
set -- $bad
passed=$((cpass + ok))
failed=$((cfail + $1 + $2))
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
