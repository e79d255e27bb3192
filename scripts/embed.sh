#!/bin/sh
# embed.sh NAME FILE...: prints a C file defining `const char *NAME(void)` that
# returns the FILEs' text, one after the other (used for gt.h and gt_internal.h
# -> ffi.cdef, and the cpu prelude: half.h's conversions, then cpu_prelude.h).
set -eu
name=$1; shift
echo "const char *$name(void);"
echo "const char *$name(void) { return"
sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$/\\n"/' "$@"
echo ";}"
