# gtlua - one entry point: build, run, test, bench, install.
CC      ?= cc
CUDA_HOME ?= /usr/local/cuda
PREFIX  ?= /usr/local
BUILD   ?= build
CFLAGS  ?= -O2 -g
WARN    = -std=c11 -Wall -Wextra -Werror -Wno-format-truncation -D_GNU_SOURCE
LUAJIT_CFLAGS := $(shell pkg-config --cflags luajit 2>/dev/null || echo -I/usr/include/luajit-2.1)
EDIT_CFLAGS   := $(shell pkg-config --cflags libedit 2>/dev/null || echo -I/usr/include/editline)
# LuaJIT and libedit are linked statically so that one binary also runs on a
# machine without their packages (the GPU machine); -Wl,-E exports the Lua C
# API (for C modules such as lfs) and the gt_ API (for the FFI).
LIBDIR  := $(shell pkg-config --variable=libdir luajit 2>/dev/null || echo /usr/lib/x86_64-linux-gnu)
LIBS    = $(LIBDIR)/libluajit-5.1.a $(LIBDIR)/libedit.a -ltinfo -lbsd -ldl -lpthread -lm
EXPORT  = -Wl,-E -Wl,-rpath,'$$ORIGIN/lib'

HAVE_CUDA := $(shell test -f $(CUDA_HOME)/include/cuda.h && test -f $(CUDA_HOME)/include/nvrtc.h && echo 1)
ifeq ($(HAVE_CUDA),1)
CUDA_CFLAGS = -DGT_HAVE_CUDA -isystem $(CUDA_HOME)/include
else
CUDA_CFLAGS =
endif

SRCS = $(wildcard src/*.c)
EMBED = $(BUILD)/obj/gt_header.c $(BUILD)/obj/cpu_prelude.c
OBJS = $(SRCS:src/%.c=$(BUILD)/obj/%.o) $(EMBED:.c=.o)
DEPS = $(OBJS:.o=.d)

# The C tests (tests/c/) link the core's objects without the host (main*.o).
TEST_SRCS = $(wildcard tests/c/*.c)
TEST_OBJS = $(TEST_SRCS:tests/c/%.c=$(BUILD)/tests/%.o)
CORE_OBJS = $(filter-out $(BUILD)/obj/main%.o,$(OBJS))
DEPS += $(TEST_OBJS:.o=.d)

.PHONY: all run test check asan bench install clean deps cuda-note
all: $(BUILD)/gtlua

$(BUILD)/gtlua: $(OBJS) | cuda-note
	$(CC) $(CFLAGS) -o $@ $(OBJS) $(EXPORT) $(LDFLAGS) $(LIBS)

cuda-note:
ifneq ($(HAVE_CUDA),1)
	@echo "note: no CUDA headers under $(CUDA_HOME) (set CUDA_HOME): building the cpu backend only"
endif

$(BUILD)/obj/%.o: src/%.c | $(BUILD)/obj
	$(CC) $(WARN) $(CFLAGS) $(LUAJIT_CFLAGS) $(EDIT_CFLAGS) $(CUDA_CFLAGS) -MMD -MP -c -o $@ $<

# gt.h and gt_internal.h travel inside the binary so that the FFI declarations
# are those headers themselves; the cpu backend's prelude travels the same way.
$(BUILD)/obj/gt_header.c: src/gt.h src/gt_internal.h scripts/embed.sh | $(BUILD)/obj
	sh scripts/embed.sh gt_header_text src/gt.h src/gt_internal.h > $@
$(BUILD)/obj/cpu_prelude.c: src/half.h src/cpu_prelude.h scripts/embed.sh | $(BUILD)/obj
	sh scripts/embed.sh gt_cpu_prelude_text src/half.h src/cpu_prelude.h > $@
$(BUILD)/obj/%.o: $(BUILD)/obj/%.c
	$(CC) $(WARN) $(CFLAGS) -c -o $@ $<

$(BUILD)/tests/%.o: tests/c/%.c | $(BUILD)/tests
	$(CC) $(WARN) $(CFLAGS) -Isrc -MMD -MP -c -o $@ $<

$(BUILD)/obj $(BUILD)/tests:
	mkdir -p $@

-include $(DEPS)

deps:
	@sh scripts/install-deps.sh

run: deps
	@$(MAKE) --no-print-directory all
	$(BUILD)/gtlua examples/quickstart.lua

# The structure checks (scripts/check/: no dependency cycle between src/
# files, no function over 60 lines), the C tests, then the specs inside
# gtlua (scripts/test.sh; .busted's default task); GTLUA_BACKEND picks the
# backend, BUSTED the busted script.  check is the same without installing.
# The build is silent (-s: compiler messages only), so that the log holds
# what test.sh prints: failures, skips and the closing "N passed, N failed".
test: deps
	@$(MAKE) -s --no-print-directory check

check: all $(BUILD)/gtlua-test
	@GTLUA_BIN_UNDER_TEST=$(BUILD)/gtlua sh scripts/test.sh

# C-level unit tests (tests/c/), built from the core's objects.
$(BUILD)/gtlua-test: $(CORE_OBJS) $(TEST_OBJS)
	$(CC) $(CFLAGS) -o $@ $(CORE_OBJS) $(TEST_OBJS) $(EXPORT) $(LDFLAGS) $(LIBS)

# The same tests (C and specs) on binaries built with ASan + UBSan, LeakSanitizer on
# (intercept_tls_get_addr=0: LSan misreads the dynamic TLS of the cpu kernels' modules
# and crashes; scripts/lsan.supp lists the known leaks).
ASAN_FLAGS = -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
asan: deps
	@$(MAKE) --no-print-directory BUILD=build-asan CFLAGS="$(ASAN_FLAGS)" LDFLAGS="-fsanitize=address,undefined" \
	  all build-asan/gtlua-test
	ASAN_OPTIONS=detect_leaks=1:intercept_tls_get_addr=0 LSAN_OPTIONS=suppressions=$(CURDIR)/scripts/lsan.supp:print_suppressions=0 \
	  UBSAN_OPTIONS=print_stacktrace=1 GTLUA_BIN_UNDER_TEST=build-asan/gtlua GTLUA_TEST_BIN=build-asan/gtlua-test \
	  sh scripts/test.sh

bench: all
	sh scripts/bench/run.sh

# make install [PREFIX=/usr/local] [DESTDIR=]: PREFIX/bin/gtlua finds PREFIX/share/gtlua
# (lua/, kernels/, examples/) by itself; a binary copied elsewhere needs GTLUA_HOME.
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/gtlua/lua/gt/report $(DESTDIR)$(PREFIX)/share/gtlua/kernels \
	  $(DESTDIR)$(PREFIX)/share/gtlua/examples/kernels
	install -m 755 $(BUILD)/gtlua $(DESTDIR)$(PREFIX)/bin/gtlua
	install -m 644 lua/gt/*.lua $(DESTDIR)$(PREFIX)/share/gtlua/lua/gt/
	install -m 644 lua/gt/report/*.lua $(DESTDIR)$(PREFIX)/share/gtlua/lua/gt/report/
	install -m 644 kernels/*.cu kernels/*.cuh $(DESTDIR)$(PREFIX)/share/gtlua/kernels/
	install -m 644 examples/*.lua $(DESTDIR)$(PREFIX)/share/gtlua/examples/
	install -m 644 examples/kernels/*.cu $(DESTDIR)$(PREFIX)/share/gtlua/examples/kernels/

clean:
	rm -rf build build-asan
