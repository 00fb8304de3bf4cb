# tbrt - build the core library, the bindings and the tbrt program; run specs.
#
#   make               build/libtbrt.so, build/libtbrt.a, build/tbrt, generated cdef
#   make check         scripts/check.sh, the README's test command: specs under
#                      ASan+UBSan, then the normal build; ends with
#                      "N passed, N failed, N skipped"
#   make test          specs against the normal build only
#   make asan          the sanitizer build in build-asan/
#   make fuzz          build-fuzz/fuzz-udp-wire, fuzz-shm-wire, fuzz-link-frames,
#                      fuzz-mlx5-device: libFuzzer against the soft device's wires,
#                      the engine's receive side and the mlx5 driver under a lying
#                      device (clang; every core file instrumented)
#   make run           tbrt scripts/pair.lua on the default software device
#   make bench         C- and Lua-driven benchmarks beside the anchor tools
#   make install PREFIX=/usr/local
#
# Sources are found by directory: every core/<part>/*.c goes into the library,
# every bindings/host/*.c into the tbrt program. Debian 12 packages only
# (scripts/deps.sh installs them).

BUILD    ?= build
# One spelling of the build directory, whoever names it (specs run `make
# install BUILD=/abs/path/build`): the dependency files name their objects
# as the compiler was told, and an object named another way would never be
# rebuilt when a header changes (files built against two layouts of a struct).
override BUILD := $(patsubst $(CURDIR)/%,%,$(abspath $(BUILD)))
PREFIX   ?= /usr/local
# Prefixes whose lib/ the dynamic linker searches: install runs ldconfig there.
SYSTEM_PREFIXES := /usr /usr/local
CC       ?= cc
LUAJIT   ?= luajit
SANITIZE ?=
OPT      ?= -O2

CORE_DIRS := core/util core/dev core/engine core/engine/transport core/soft core/soft/wire core/soft/wire/shm core/soft/wire/udp core/ibverbs core/mlx5 core/mlx5/model
CORE_SRC  := $(foreach d,$(CORE_DIRS),$(wildcard $(d)/*.c))
CORE_OBJ  := $(patsubst %.c,$(BUILD)/obj/%.o,$(CORE_SRC))
HOST_SRC  := $(wildcard bindings/host/*.c)
HOST_OBJ  := $(patsubst %.c,$(BUILD)/obj/%.o,$(HOST_SRC))
HEADERS   := core/include/tbrt.h $(filter-out core/include/tbrt.h,$(sort $(wildcard core/include/*.h)))

# `make` alone builds all, whatever rules the part fragments below define first.
.DEFAULT_GOAL := all
# A recipe that fails or is interrupted leaves no target behind (a half-written
# file would count as up to date the next time).
.DELETE_ON_ERROR:

# Generated tables (mlx5 layouts etc.) live in $(BUILD)/gen; parts add to
# GEN_HEADERS in their own makefile fragment (core/<part>/part.mk).
GEN_HEADERS :=
-include $(wildcard core/*/part.mk bindings/*/part.mk)

CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-format-truncation -g $(OPT) -fPIC \
               -Icore/include -Icore -I$(BUILD)/gen $(SANITIZE)
CFLAGS   ?=
ALL_CFLAGS := $(CFLAGS_BASE) $(CFLAGS)
LDLIBS_CORE := -ldl -lpthread -lm
LUAJIT_CFLAGS := $(shell pkg-config --cflags luajit 2>/dev/null)
LUAJIT_LIBS   := $(shell pkg-config --libs luajit 2>/dev/null)
# Debian's lua5.1-luv.pc requires lua5.1.pc (PUC Lua's -dev package, not
# installed), so pkg-config gives nothing: name luv's header directory. It
# comes after LUAJIT_CFLAGS, so <lua.h> is always LuaJIT's.
LUV_CFLAGS    := -I/usr/include/lua5.1 $(shell pkg-config --cflags libuv 2>/dev/null)
LUV_LIBS      := -llua5.1-luv $(shell pkg-config --libs libuv 2>/dev/null)

LIB_SO   := $(BUILD)/libtbrt.so
LIB_A    := $(BUILD)/libtbrt.a
TBRT     := $(BUILD)/tbrt
CDEF     := $(BUILD)/gen/tbrt/cdef.lua
HASH_H   := $(BUILD)/gen/tbrt_header_hash.h
PC       := $(BUILD)/tbrt.pc

.PHONY: all lib check test test-asan asan fuzz run bench install clean deps cdef-check
BENCH_C  := $(BUILD)/tbrt-bench
# the other C-driven benchmarks: views against copies, many links, memcpy
BENCH_MORE := $(BUILD)/tbrt-stream $(BUILD)/tbrt-scale $(BUILD)/tbrt-memcpy $(BUILD)/tbrt-cost \
              $(BUILD)/tbrt-line
# what they share; the message check also as a library for the Lua twins
BENCH_SRC := scripts/bench/bench_common.c scripts/bench/bench_pattern.c
BENCH_HDR := scripts/bench/bench_common.h scripts/bench/bench_pattern.h
BENCH_PATTERN_SO := $(BUILD)/libtbrt-bench-pattern.so
all: lib $(TBRT) $(CDEF) $(PC) $(BENCH_C) $(BENCH_MORE) $(BENCH_PATTERN_SO)
lib: $(LIB_SO) $(LIB_A)

# The header hash ties the library, the generated cdef and the bindings
# together: a header edited without regenerating cannot load.
$(HASH_H): $(HEADERS)
	@mkdir -p $(dir $@)
	@h=$$(cat $(HEADERS) | sha256sum | cut -c1-16); \
	 printf '/* generated from %s */\n#define TBRT_HEADER_HASH "%s"\n' "$(HEADERS)" "$$h" > $@.tmp && mv $@.tmp $@

$(CDEF): $(HEADERS) bindings/gen_cdef.lua
	@mkdir -p $(dir $@)
	$(LUAJIT) bindings/gen_cdef.lua --cc "$(CC)" --cppflags "-Icore/include" $(HEADERS) > $@.tmp && mv $@.tmp $@
	$(LUAJIT) bindings/gen_cdef.lua --check $@ $(HEADERS)

cdef-check: $(CDEF)
	$(LUAJIT) bindings/gen_cdef.lua --check $(CDEF) $(HEADERS)

$(BUILD)/obj/%.o: %.c $(HASH_H) $(GEN_HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/bindings/host/%.o: bindings/host/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LUAJIT_CFLAGS) $(LUV_CFLAGS) -MMD -MP -c $< -o $@

$(LIB_SO): $(CORE_OBJ) core/libtbrt.map
	$(CC) -shared -Wl,-soname,libtbrt.so -Wl,-z,defs -Wl,--version-script=core/libtbrt.map $(SANITIZE) -o $@ $(CORE_OBJ) $(LDLIBS_CORE)

$(LIB_A): $(CORE_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(TBRT): $(HOST_OBJ)
	$(CC) $(SANITIZE) -o $@ $^ -Wl,-E $(LUAJIT_LIBS) $(LUV_LIBS) -ldl -lm

# The C-driven benchmark of `make bench` (scripts/bench/), built with
# everything so it always compiles.
$(BENCH_C): scripts/bench/tbrt_bench.c $(BENCH_SRC) $(BENCH_HDR) $(HEADERS) $(LIB_SO)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(BENCH_SRC) -L$(BUILD) -ltbrt -Wl,-rpath,'$$ORIGIN'

# tbrt-memcpy measures the core's bulk copy, which the library does not export
$(BUILD)/tbrt-memcpy: BENCH_EXTRA := core/util/copy.c
$(BUILD)/tbrt-memcpy: core/util/copy.c
$(BENCH_MORE): $(BUILD)/tbrt-%: scripts/bench/tbrt_%.c $(BENCH_SRC) $(BENCH_HDR) $(HEADERS) $(LIB_SO)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(BENCH_SRC) $(BENCH_EXTRA) -L$(BUILD) -ltbrt -Wl,-rpath,'$$ORIGIN'

$(BENCH_PATTERN_SO): scripts/bench/bench_pattern.c scripts/bench/bench_pattern.h
	$(CC) $(ALL_CFLAGS) -shared -o $@ $<

$(PC): Makefile
	@mkdir -p $(dir $@)
	@printf 'prefix=%s\nlibdir=$${prefix}/lib\nincludedir=$${prefix}/include\n\nName: tbrt\nDescription: Lua-scriptable RDMA transport runtime (core library)\nVersion: 0.1.0\nRequires.private: libibverbs\nLibs: -L$${libdir} -ltbrt\nLibs.private: -ldl -lpthread -lm\nCflags: -I$${includedir}\n' "$(PREFIX)" > $@

-include $(CORE_OBJ:.o=.d) $(HOST_OBJ:.o=.d)

# ---- specs -----------------------------------------------------------------
# Specs run inside the tbrt program (LuaJIT + luv on one loop); the core is
# reached through the FFI. TBRT_BUILD tells the bindings which build to load.
SPEC_RUN = TBRT_BUILD=$(abspath $(1)) $(1)/tbrt spec/support/run.lua $(SPECS)
SPECS ?=

test: all
	@rm -f $(BUILD)/spec-summary
	$(call SPEC_RUN,$(BUILD)) --summary-file=$(BUILD)/spec-summary

asan:
	$(MAKE) BUILD=build-asan OPT=-O1 SANITIZE="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" all

test-asan: asan
	@rm -f build-asan/spec-summary
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  TBRT_ASAN=1 $(call SPEC_RUN,build-asan) --summary-file=build-asan/spec-summary

# libFuzzer targets (spec/support/fuzz_*.c): the core built by clang with
# coverage, ASan and UBSan in build-fuzz/ (clang has no -Wformat-truncation).
FUZZ_SANITIZE := -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer \
                 -fno-sanitize-recover=undefined
fuzz:
	$(MAKE) BUILD=build-fuzz CC=clang OPT=-O1 CFLAGS=-Wno-unknown-warning-option \
	  SANITIZE="$(FUZZ_SANITIZE)" build-fuzz/fuzz-udp-wire build-fuzz/fuzz-shm-wire \
	  build-fuzz/fuzz-link-frames build-fuzz/fuzz-mlx5-device

# A fuzz target's link (its source first among the prerequisites): to a
# .tmp file renamed when whole. The fuzz specs run `make fuzz` themselves, and
# a spec killed mid-link (SIGKILL: make cannot clean up) left a zero-byte
# target that the next `make fuzz` took as up to date.
FUZZ_LINK = $(CC) $(ALL_CFLAGS) -fsanitize=fuzzer $(FUZZ_LDFLAGS) -o $@.tmp $< $(BUILD)/libtbrt.a \
            $(LDLIBS_CORE) && mv -f $@.tmp $@

# The engine's target (the wires' are in core/soft/part.mk): a hostile
# peer's frames into a link's receive ring.
$(BUILD)/fuzz-link-frames: spec/support/fuzz_link_frames.c core/engine/link.h \
                           core/engine/transport/transport.h core/engine/transport/framing.h \
                           $(BUILD)/libtbrt.a
	$(FUZZ_LINK)

# The README's test command is scripts/check.sh (the sanitizer pass, the
# normal pass, one summary line over both); this runs it too.
check:
	@./scripts/check.sh

run: all
	$(TBRT) scripts/pair.lua

bench: all
	./scripts/deps.sh bench
	$(MAKE) $(BUILD)/mpi-ring
	$(TBRT) scripts/bench.lua

# The anchor of the bench's ring of processes, built by Open MPI's mpicc
# (libopenmpi-dev, from deps.sh): only for the bench, `all` needs no MPI
$(BUILD)/mpi-ring: scripts/bench/mpi_ring.c
	@mkdir -p $(dir $@)
	mpicc -std=c11 -O2 -Wall -Wextra -Werror -o $@ $<

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include \
	  $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/share/tbrt/lua/tbrt
	install -m 755 $(TBRT) $(DESTDIR)$(PREFIX)/bin/tbrt
	install -m 644 $(LIB_SO) $(LIB_A) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 $(HEADERS) $(DESTDIR)$(PREFIX)/include/
	# $(PC) was written with the PREFIX of the build; name the install's
	sed 's|^prefix=.*|prefix=$(PREFIX)|' $(PC) > $(DESTDIR)$(PREFIX)/lib/pkgconfig/tbrt.pc
	install -m 644 bindings/tbrt/*.lua $(CDEF) $(DESTDIR)$(PREFIX)/share/tbrt/lua/tbrt/
	cd lua && find tbrt -name '*.lua' | while read f; do \
	  install -D -m 644 "$$f" "$(DESTDIR)$(PREFIX)/share/tbrt/lua/$$f" || exit 1; done
	if [ -d scripts ]; then cp -r scripts $(DESTDIR)$(PREFIX)/share/tbrt/; fi
	@# a system prefix's lib/ is on the dynamic linker's path: refresh its
	@# cache; other prefixes need LD_LIBRARY_PATH or -rpath (README, Install)
	@if [ -z "$(DESTDIR)" ] && case " $(SYSTEM_PREFIXES) " in *" $(PREFIX) "*) true;; *) false;; esac; then \
	  echo "ldconfig"; ldconfig; fi

clean:
	rm -rf build build-asan build-fuzz
