#!/bin/sh
# embed.sh NAME FILE: prints a C file defining `const char *NAME(void)` that
# returns FILE's text (used for gt.h -> ffi.cdef and the cpu prelude).
set -eu
echo "const char *$1(void);"
echo "const char *$1(void) { return"
sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$/\\n"/' "$2"
echo ";}"
