# stagehand: `make demo` and `make test` are all a new user needs.
# Every target installs what is missing first (scripts/deps.sh; a no-op when
# everything is there).

RUNTIMES := luajit lua5.4 lua5.3 lua5.2 lua5.1
CC ?= cc
WARN := -Wall -Wextra -Wshadow -Wconversion -Wstrict-prototypes -Wmissing-prototypes
# What this system's C library has, for the core's POSIX layer
# (csrc/platform/sh_platform.h; scripts/probe.sh tries each).
# (Probed once, when a recipe first needs it: after deps has installed the
# compiler on a machine that had none.)
PLAT = $(eval PLAT := $$(shell sh scripts/probe.sh $$(CC) 2>/dev/null))$(PLAT)
CFLAGS_CORE = -std=c99 -O2 -g -fPIC $(WARN) $(PLAT)
# How a Lua C module is linked: macOS resolves Lua's functions when the
# module is loaded (-undefined dynamic_lookup), as LuaRocks links it there.
MODULE_LINK := $(shell [ "$$(uname -s 2>/dev/null)" = Darwin ] && echo "-bundle -undefined dynamic_lookup" || echo -shared)
# csrc/core: the core, plain C without lua.h; csrc/platform: the system
# under it (POSIX, Win32); csrc/lua: the classic C module over both.
PORTABLE_SRC := $(addprefix csrc/core/,sh_grow.c sh_heap.c sh_clock.c sh_timer.c sh_pool.c sh_barrier.c sh_ids.c \
	sh_notify.c sh_msg.c sh_port.c sh_rounds.c sh_work.c sh_work_take.c)
CORE_SRC := $(PORTABLE_SRC) csrc/platform/unix/sh_unix.c
WIN_CORE_SRC := $(PORTABLE_SRC) csrc/platform/win/sh_win.c
CORE_HDR := $(addprefix csrc/core/,stagehand.h sh_heap.h sh_grow.h sh_checks.h sh_threads.h sh_sync.h sh_watchers.h \
	sh_work_impl.h) \
	csrc/platform/sh_platform.h csrc/lua/lthreads.h
MODULE_SRC := $(addprefix csrc/lua/,lstagehand.c lvalues.c lchannels.c lworkers.c lpool.c)
C_HOSTS := build/c_host/host_luajit build/c_host/host_lua5.4 build/c_host/host_lua5.3 build/c_host/host_static_luajit \
	build/c_host/host_static_lua5.4 build/c_host/host_noexport_lua5.4 # (examples/c_host)

INC_luajit := /usr/include/luajit-2.1
INC_lua5.4 := /usr/include/lua5.4
INC_lua5.3 := /usr/include/lua5.3
INC_lua5.2 := /usr/include/lua5.2
INC_lua5.1 := /usr/include/lua5.1

SANITIZE := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

.PHONY: test-browser test-deps test-x86 test-x86-c bench-love love-dist love-kit test-systems test-arm64 rock windows windows-x86 test-windows test-windows-c portable all deps build docs test test-c test-oom tsan c-host test-lua demo bench bench-count env clean sanitize check-warnings sanitize-love tsan-love chaos soak-threads soak-love soak-windows fuzz valgrind

all: build

deps:
	@sh scripts/deps.sh

# (Every target a user types depends on deps; `make build` alone does not,
# so that rebuilding asks dpkg nothing.)
build: $(foreach rt,$(RUNTIMES),build/$(rt)/stagehand/_core.so)

# The core's symbols stay exported: the FFI backend ffi.load()s this same file.
# (It pins itself in memory, sh_pin_library, so finalizers never outlive it.)
define module_rule
build/$(1)/stagehand/_core.so: $(CORE_SRC) $(MODULE_SRC) $(CORE_HDR)
	@mkdir -p $$(@D)
	$$(CC) $$(CFLAGS_CORE) -I$$(INC_$(1)) $(MODULE_LINK) -o $$@ $(CORE_SRC) $(MODULE_SRC) -lm -ldl -lpthread
endef
$(foreach rt,$(RUNTIMES),$(eval $(call module_rule,$(rt))))

# The Linux core as make love-kit ships it to players: for LuaJIT (LÖVE's),
# its glibc functions bound to versions every glibc since 2.17 has
# (csrc/platform/unix/sh_glibc_compat.h), so it loads on older systems than
# this one; the kit strips it.
KIT_CORE := build/kit/linux-x64/_core.so
$(KIT_CORE): $(CORE_SRC) $(MODULE_SRC) $(CORE_HDR) csrc/platform/unix/sh_glibc_compat.h
	@mkdir -p $(@D)
	$(CC) -std=c99 -O2 -fPIC $(WARN) $(PLAT) -include csrc/platform/unix/sh_glibc_compat.h -I$(INC_luajit) \
	  -shared -o $@ $(CORE_SRC) $(MODULE_SRC) -lm -Wl,--no-as-needed -l:libdl.so.2 -l:libpthread.so.0 -Wl,--as-needed

# ... and the same for 64-bit ARM Linux (Raspberry Pi, ARM handhelds that
# run LÖVE), cross-built; scripts/arm64_check.sh runs it under qemu.
ARM64_CC := aarch64-linux-gnu-gcc
# (libc6-dev-arm64-cross is only a recommendation of the compiler, and
# deps.sh installs without recommendations: named, or a fresh machine has
# a cross compiler with no C library headers.)
ARM64_PKGS := gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static debootstrap
KIT_CORE_ARM64 := build/kit/linux-arm64/_core.so
$(KIT_CORE_ARM64): $(CORE_SRC) $(MODULE_SRC) $(CORE_HDR) csrc/platform/unix/sh_glibc_compat.h
	@EXTRA_PKGS="$(ARM64_PKGS)" sh scripts/deps.sh
	@mkdir -p $(@D)
	$(ARM64_CC) -std=c99 -O2 -fPIC $(WARN) $$(sh scripts/probe.sh $(ARM64_CC)) \
	  -include csrc/platform/unix/sh_glibc_compat.h -I$(INC_luajit) -shared -o $@ $(CORE_SRC) $(MODULE_SRC) -lm \
	  -Wl,--no-as-needed -l:libdl.so.2 -l:libpthread.so.0 -Wl,--as-needed

TEST_SRC := csrc/test/test_core.c csrc/test/test_pool.c csrc/test/fuzz_core.c
TEST_DEFS := -DSH_DEBUG_CHECKS -DCORPUS_DIR='"csrc/test/corpus"' -D_DEFAULT_SOURCE

build/test_core: $(CORE_SRC) $(CORE_HDR) $(TEST_SRC) csrc/test/fuzz_core.h csrc/test/test_core.h
	@mkdir -p $(@D)
	$(CC) -std=c99 -O1 -g $(WARN) $(PLAT) $(TEST_DEFS) -o $@ $(CORE_SRC) $(TEST_SRC) -lm -ldl -lpthread

# libFuzzer over the core (clang): FUZZ_SECONDS of it, keeping what it
# finds in build/fuzz-corpus; then only the inputs that reach something
# csrc/test/corpus does not are merged into it (the C tests replay that
# folder every run, so it grows by what adds coverage, not by every input).
FUZZ_SECONDS ?= 60
build/fuzz_core: $(CORE_SRC) $(CORE_HDR) csrc/test/fuzz_core.c csrc/test/fuzz_core.h
	@mkdir -p $(@D)
	clang -std=c99 $(PLAT) -O1 -g -DSH_LIBFUZZER -DSH_DEBUG_CHECKS -fsanitize=fuzzer,address,undefined -o $@ $(CORE_SRC) csrc/test/fuzz_core.c -lm -ldl -lpthread

fuzz:
	@EXTRA_PKGS="clang libclang-rt-14-dev" sh scripts/deps.sh
	$(MAKE) build/fuzz_core
	@mkdir -p build/fuzz-corpus
	./build/fuzz_core -max_total_time=$(FUZZ_SECONDS) -max_len=512 build/fuzz-corpus csrc/test/corpus
	./build/fuzz_core -merge=1 -max_len=512 csrc/test/corpus build/fuzz-corpus

test-c: deps build/test_core build/test_threads
	./build/test_core
	./build/test_threads

# The threads' core (messages, notifiers, ports, round barriers, work
# queues) driven from several threads at once; `make tsan` runs it, and the
# thread specs on Lua 5.4 against a module built the same way, under
# ThreadSanitizer, which fails on any data race.
THREADS_TEST := csrc/test/test_threads.c csrc/test/test_work.c
build/test_threads: $(CORE_SRC) $(CORE_HDR) $(THREADS_TEST) csrc/test/test_threads.h
	@mkdir -p $(@D)
	$(CC) -std=c99 -O1 -g $(WARN) $(PLAT) -D_DEFAULT_SOURCE -o $@ $(CORE_SRC) $(THREADS_TEST) -lm -ldl -lpthread

TSAN := -fsanitize=thread -fno-omit-frame-pointer
build/tsan/test_threads: $(CORE_SRC) $(CORE_HDR) $(THREADS_TEST)
	@mkdir -p $(@D)
	$(CC) -std=c99 -O1 -g $(WARN) $(PLAT) $(TSAN) -D_DEFAULT_SOURCE -o $@ $(CORE_SRC) $(THREADS_TEST) -lm -ldl -lpthread

build/tsan/lua5.4/stagehand/_core.so: $(CORE_SRC) $(MODULE_SRC) $(CORE_HDR)
	@mkdir -p $(@D)
	$(CC) -std=c99 -O1 -g -fPIC $(WARN) $(PLAT) $(TSAN) -I$(INC_lua5.4) -shared -o $@ $(CORE_SRC) $(MODULE_SRC) -lm -ldl -lpthread

tsan: deps build build/tsan/test_threads build/tsan/lua5.4/stagehand/_core.so
	TSAN_OPTIONS=halt_on_error=1 ./build/tsan/test_threads
	@top=$$(pwd); LUA_PATH="$$top/lua/?.lua;$$top/lua/?/init.lua;;" LUA_CPATH="$$top/build/tsan/lua5.4/?.so;;" \
	  LD_PRELOAD="$$($(CC) -print-file-name=libtsan.so)" TSAN_OPTIONS=halt_on_error=1:report_signal_unsafe=0 \
	  lua5.4 /usr/bin/busted -o utfTerminal spec/threads_spec.lua spec/ports_spec.lua spec/hosted_spec.lua

# The core's C tests built for 32-bit x86 Linux, whose default maths is
# x87's (a sum kept wider than it is stored once broke a stall clock's
# invariant there), run natively or, on a kernel that runs no 32-bit
# programs, under qemu. The 32-bit Windows specs cover the same and more
# where wine's 32-bit half runs (scripts/test_windows.sh).
# (-D_FILE_OFFSET_BITS=64: the corpus folder is read through 64-bit
# offsets, which a 32-bit readdir under qemu otherwise refuses.)
X86_CC := i686-linux-gnu-gcc
X86_PKGS := gcc-i686-linux-gnu libc6-dev-i386-cross libc6:i386 qemu-user-static
build/x86/test_core: $(CORE_SRC) $(CORE_HDR) $(TEST_SRC) csrc/test/fuzz_core.h csrc/test/test_core.h
	@mkdir -p $(@D)
	$(X86_CC) -std=c99 -O1 -g $(WARN) $$(sh scripts/probe.sh $(X86_CC)) $(TEST_DEFS) -D_FILE_OFFSET_BITS=64 -o $@ $(CORE_SRC) $(TEST_SRC) \
	  -lm -ldl -lpthread
build/x86/test_threads: $(CORE_SRC) $(CORE_HDR) $(THREADS_TEST) csrc/test/test_threads.h
	@mkdir -p $(@D)
	$(X86_CC) -std=c99 -O1 -g $(WARN) $$(sh scripts/probe.sh $(X86_CC)) -D_DEFAULT_SOURCE -o $@ $(CORE_SRC) \
	  $(THREADS_TEST) -lm -ldl -lpthread
test-x86: test-x86-c
	@X86_CC=$(X86_CC) WARN="$(WARN)" X86_SRC="$(CORE_SRC) $(MODULE_SRC)" sh scripts/x86_lua.sh
test-x86-c:
	@EXTRA_PKGS="$(X86_PKGS)" sh scripts/deps.sh
	@$(MAKE) -s build/x86/test_core build/x86/test_threads
	@run=$$(sh scripts/x86_runs.sh || echo qemu-i386-static); \
	  echo "(32-bit x86, $${run:-natively})"; $$run ./build/x86/test_core && $$run ./build/x86/test_threads

# A Lua host whose allocator fails on demand (as Lua's own ltests does):
# every allocation of each operation in spec/oom/failing_alloc.lua (and of
# worker pools' main side in failing_alloc_pools.lua, and of the luv driver
# in failing_alloc_luv.lua) fails in turn, and the orchestrator must raise
# "not enough memory" and stay whole. One host for each runtime whose
# tables behave apart: Lua 5.4 (build/oom_host), LuaJIT, the runtime of
# LÖVE and of the FFI backend (build/oom_host_luajit), and Lua 5.1
# (build/oom_host_lua5.1); LuaJIT and 5.1 make a key for a nil stored
# under an absent one, which 5.4 does not, so a cleanup can itself need
# memory there.
# (The C allocations of a build with ALLOC_HOOKS go through hooks its test
# program defines: sh_test_malloc, sh_test_calloc, sh_test_realloc.)
ALLOC_HOOKS := -Dmalloc=sh_test_malloc -Dcalloc=sh_test_calloc -Drealloc=sh_test_realloc
OOM_RUNTIMES := lua5.4 luajit lua5.1
OOM_HOSTS := build/oom_host build/oom_host_luajit build/oom_host_lua5.1
OOM_MODULES := $(foreach rt,$(OOM_RUNTIMES),build/oom/$(rt)/stagehand/_core.so)
LIB_lua5.4 := -llua5.4
LIB_luajit := -lluajit-5.1
LIB_lua5.1 := -llua5.1
# (Each host exports its C allocation hooks, -Wl,-E, to the module built
# for it: build/oom/<runtime>, whose malloc, calloc and realloc on the main
# thread count and fail with Lua's allocations. All are built with ASan
# and UBSan: what a failure leaves unfreed, LeakSanitizer reports at exit.)
define oom_rule
$(2): csrc/test/oom_host.c
	@mkdir -p $$(@D)
	$$(CC) -std=c99 -O1 -g $$(WARN) $$(SANITIZE) -I$$(INC_$(1)) -Wl,-E -o $$@ csrc/test/oom_host.c $$(LIB_$(1)) -lpthread
build/oom/$(1)/stagehand/_core.so: $$(CORE_SRC) $$(MODULE_SRC) $$(CORE_HDR)
	@mkdir -p $$(@D)
	$$(CC) -std=c99 -O1 -g -fPIC $$(WARN) $$(PLAT) $$(SANITIZE) -DSH_DEBUG_CHECKS \
	  $$(ALLOC_HOOKS) \
	  -I$$(INC_$(1)) -shared -o $$@ $$(CORE_SRC) $$(MODULE_SRC) -lm -ldl -lpthread
endef
$(eval $(call oom_rule,lua5.4,build/oom_host))
$(eval $(call oom_rule,luajit,build/oom_host_luajit))
$(eval $(call oom_rule,lua5.1,build/oom_host_lua5.1))

# And the core's own C allocations (csrc/test/oom_core.c): malloc, calloc
# and realloc renamed to hooks that refuse one allocation a run, each in
# turn, under ASan and UBSan with leak checks.
build/oom_core: $(CORE_SRC) $(CORE_HDR) csrc/test/oom_core.c
	@mkdir -p $(@D)
	$(CC) -std=c99 -O1 -g $(WARN) $(PLAT) $(SANITIZE) -DSH_DEBUG_CHECKS -D_DEFAULT_SOURCE \
	  $(ALLOC_HOOKS) \
	  -o $@ $(CORE_SRC) csrc/test/oom_core.c -lm -ldl -lpthread

test-oom: deps build build/oom_core $(OOM_HOSTS) $(OOM_MODULES)
	./build/oom_core
	@sh scripts/oom.sh

# (what every section of make test needs is installed first, in one
# apt-get: scripts/test.sh runs its sections in two lanes at once, and two
# apt-get runs at once fight over dpkg's lock)
test: test-deps build $(KIT_CORE) $(KIT_CORE_ARM64) build/test_core build/test_threads build/oom_core $(OOM_HOSTS) $(OOM_MODULES) $(C_HOSTS)
	@sh scripts/test.sh $(RUNTIMES)
test-deps:
	@EXTRA_PKGS="$(WIN_PKGS) $(ARM64_PKGS) $(MSVC_PKGS) zip clang" sh scripts/deps.sh

# examples/c_host: a C program embedding LuaJIT, Lua 5.4 or 5.3 that runs
# a stagehand frame loop, as an engine would (make test builds and runs
# each).
c-host: deps $(C_HOSTS)
build/c_host/host_luajit: examples/c_host/host.c
	@mkdir -p $(@D)
	$(CC) -std=c99 -O2 $(WARN) -I$(INC_luajit) -o $@ $< -lluajit-5.1 -lm -ldl
build/c_host/host_lua5.4: examples/c_host/host.c
	@mkdir -p $(@D)
	$(CC) -std=c99 -O2 $(WARN) -I$(INC_lua5.4) -o $@ $< -llua5.4 -lm -ldl
build/c_host/host_lua5.3: examples/c_host/host.c
	@mkdir -p $(@D)
	$(CC) -std=c99 -O2 $(WARN) -I$(INC_lua5.3) -o $@ $< -llua5.3 -lm -ldl
# The engine that links Lua statically and stagehand's core into itself
# (package.preload): LuaJIT's exports its symbols (-Wl,-E), so the FFI
# backend finds the core in the program; Lua 5.4's runs the C module.
build/c_host/host_static_luajit: examples/c_host/host.c $(CORE_SRC) $(MODULE_SRC) $(CORE_HDR)
	@mkdir -p $(@D)
	$(CC) -std=c99 -O2 $(WARN) $(PLAT) -DSH_LINKED -I$(INC_luajit) -o $@ $< $(CORE_SRC) $(MODULE_SRC) \
	  -l:libluajit-5.1.a -Wl,-E -lm -ldl -lpthread
build/c_host/host_static_lua5.4: examples/c_host/host.c $(CORE_SRC) $(MODULE_SRC) $(CORE_HDR)
	@mkdir -p $(@D)
	$(CC) -std=c99 -O2 $(WARN) $(PLAT) -DSH_LINKED -I$(INC_lua5.4) -o $@ $< $(CORE_SRC) $(MODULE_SRC) \
	  -l:liblua5.4.a -lm -ldl -lpthread
# (and one that links Lua statically without exporting it, then loads the
# module: make test checks what it is told)
build/c_host/host_noexport_lua5.4: examples/c_host/host.c
	@mkdir -p $(@D)
	$(CC) -std=c99 -O2 $(WARN) -I$(INC_lua5.4) -o $@ $< -l:liblua5.4.a -lm -ldl

demo: deps build/luajit/stagehand/_core.so
	@eval "$$(sh scripts/env.sh luajit)" && luajit examples/scene_loader.lua

# docs/reference.md and types/stagehand.lua (a LuaLS meta file), from the
# annotations in lua/stagehand/; spec/docs_spec.lua fails when they are stale.
docs: deps
	@lua5.4 scripts/docgen.lua

bench: deps build
	@eval "$$(sh scripts/env.sh luajit)" && luajit bench/bench.lua

# The LÖVE loading scene against love-loader and lily (LOVE_PEERS=DIR holds
# their sources; without it, stagehand alone). About a minute.
bench-love: deps build
	@sh scripts/bench_love.sh

# The same costs counted rather than timed (cachegrind): instructions and
# reads from memory per job, next to a bare coroutine's, the same on a busy
# host as on a quiet one. About two minutes.
bench-count: deps build
	@EXTRA_PKGS=valgrind sh scripts/deps.sh
	@eval "$$(sh scripts/env.sh luajit)" && luajit bench/count.lua

LUA ?= luajit
env:
	@sh scripts/env.sh $(LUA)

# Many more seeded chaos scenes than make test runs (CHAOS_SEEDS=n to change):
# loading scenes, game code doing anything from inside callbacks, and slot
# grants, when_idle, stall clocks, keys, cycles, groups, priorities,
# next_wake, unheard failures, two orchestrators waiting on each other and
# what a worker pool offers checked against models of their own. Each
# runtime's ends are then compared, as make test compares its own scenes';
# then the offer model runs inside LÖVE, its workers LÖVE threads.
CHAOS_SEEDS ?= 500
# Worker pools and ports driven at random with real threads (spec/soak/threads.lua):
# SOAK_SEEDS seeds (from SOAK_FIRST) on each runtime with each driver, then a few under
# ThreadSanitizer.
SOAK_SEEDS ?= 20
SOAK_FIRST ?= 1
TSAN_SEEDS ?= 3
TSAN_FIRST ?= 1
soak-threads: deps build build/tsan/lua5.4/stagehand/_core.so
	@for rt in $(RUNTIMES); do for driver in manual luv; do \
	  echo "== threads soak on $$rt, $$driver driver ($(SOAK_SEEDS) seeds)"; \
	  eval "$$(sh scripts/env.sh $$rt)"; \
	  for s in $$(seq $(SOAK_FIRST) $$(($(SOAK_FIRST) + $(SOAK_SEEDS) - 1))); do \
	    SOAK_DRIVER=$$driver $$rt spec/soak/threads.lua $$s || exit 1; done; \
	done; done
	@echo "== threads soak under ThreadSanitizer (lua5.4, 3 seeds)"
	@top=$$(pwd); for s in 1 2 3; do LUA_PATH="$$top/lua/?.lua;$$top/lua/?/init.lua;;" \
	  LUA_CPATH="$$top/build/tsan/lua5.4/?.so;;" LD_PRELOAD="$$($(CC) -print-file-name=libtsan.so)" \
	  TSAN_OPTIONS=halt_on_error=1:report_signal_unsafe=0 lua5.4 spec/soak/threads.lua $$s || exit 1; done

# The same soak where games ship (scripts/soak_platforms.sh): inside LÖVE,
# with LÖVE threads and LÖVE objects, and on Windows' runtimes under wine.
soak-love: deps build
	@SOAK_FIRST=$(SOAK_FIRST) SOAK_SEEDS=$(SOAK_SEEDS) sh scripts/soak_platforms.sh love
soak-windows: windows
	@SOAK_FIRST=$(SOAK_FIRST) SOAK_SEEDS=$(SOAK_SEEDS) sh scripts/soak_platforms.sh windows

chaos: deps build
	@rm -rf build/chaos-ends && mkdir -p build/chaos-ends
	@for rt in $(RUNTIMES); do \
	  echo "== chaos on $$rt ($(CHAOS_SEEDS) seeds)"; \
	  eval "$$(sh scripts/env.sh $$rt)"; CHAOS_SEEDS=$(CHAOS_SEEDS) STAGEHAND_ENDS=$(CURDIR)/build/chaos-ends/$$rt \
	    $$rt /usr/bin/busted -o utfTerminal spec/chaos_spec.lua spec/reentry_spec.lua spec/bad_input_spec.lua spec/grant_model_spec.lua spec/idle_model_spec.lua spec/stall_model_spec.lua spec/keys_model_spec.lua spec/cycle_model_spec.lua spec/combine_model_spec.lua spec/priority_model_spec.lua spec/pump_model_spec.lua spec/heard_model_spec.lua spec/pair_model_spec.lua spec/offer_model_spec.lua || exit 1; \
	done
	@echo "== the scenes end alike on every runtime"
	@sh scripts/same_ends.sh build/chaos-ends
	@echo "== the offer model inside LÖVE ($(CHAOS_SEEDS) seeds), on the native core and on the pure-Lua core"
	@CHAOS_SEEDS=$(CHAOS_SEEDS) sh scripts/love_specs.sh spec/love_busted spec/offer_model_spec.lua
	@CHAOS_SEEDS=$(CHAOS_SEEDS) STAGEHAND_BACKEND=lua sh scripts/love_specs.sh spec/love_busted spec/offer_model_spec.lua

# AddressSanitizer + UndefinedBehaviorSanitizer: the core's C tests, then the
# busted suite against a sanitized build of the module on Lua 5.4, and on
# LuaJIT through both backends (the interpreters are not sanitized, so the
# runtime is preloaded). The core's invariant checks run after every change
# (one in n/64 past 64 entries: csrc/core/sh_checks.h).
# Lua 5.4's run goes beside LuaJIT's two (two cores; each run takes about half
# a minute); their outputs are printed in order once all are done.
build/sanitize/test_core: $(CORE_SRC) $(CORE_HDR) $(TEST_SRC) csrc/test/fuzz_core.h
	@mkdir -p $(@D)
	$(CC) -std=c99 -O1 -g $(WARN) $(PLAT) $(SANITIZE) $(TEST_DEFS) -o $@ $(CORE_SRC) $(TEST_SRC) -lm -ldl -lpthread

define sanitized_rule
build/sanitize/$(1)/stagehand/_core.so: $(CORE_SRC) $(MODULE_SRC) $(CORE_HDR)
	@mkdir -p $$(@D)
	$$(CC) -std=c99 -O1 -g -fPIC $$(WARN) $$(PLAT) $$(SANITIZE) -DSH_DEBUG_CHECKS -I$$(INC_$(1)) -shared -o $$@ $(CORE_SRC) $(MODULE_SRC) -lm -ldl -lpthread
endef
$(foreach rt,lua5.4 luajit,$(eval $(call sanitized_rule,$(rt))))

# The LÖVE specs against a sanitized core (LÖVE's LuaJIT preloads the
# runtime): its hosted workers, LÖVE objects and channels are C paths only
# LÖVE reaches. A build of its own, apart from make sanitize's: make test
# runs this in its cross lane, beside the native lane's make sanitize.
build/sanitize-love/stagehand/_core.so: $(CORE_SRC) $(MODULE_SRC) $(CORE_HDR)
	@mkdir -p $(@D)
	$(CC) -std=c99 -O1 -g -fPIC $(WARN) $(PLAT) $(SANITIZE) -DSH_DEBUG_CHECKS -I$(INC_luajit) -shared -o $@ $(CORE_SRC) $(MODULE_SRC) -lm -ldl -lpthread
sanitize-love: deps build build/sanitize-love/stagehand/_core.so
	@SANITIZED=build/sanitize-love sh scripts/love_specs.sh

# The LÖVE specs and the thread soak inside LÖVE against a core built with
# ThreadSanitizer (scripts/tsan_love.sh says which reports fail it).
build/tsan-love/stagehand/_core.so: $(CORE_SRC) $(MODULE_SRC) $(CORE_HDR)
	@mkdir -p $(@D)
	$(CC) -std=c99 -O1 -g -fPIC $(WARN) $(PLAT) $(TSAN) -I$(INC_luajit) -shared -o $@ $(CORE_SRC) $(MODULE_SRC) -lm -ldl -lpthread
tsan-love: deps build build/tsan-love/stagehand/_core.so
	@TSAN_FIRST=$(TSAN_FIRST) TSAN_SEEDS=$(TSAN_SEEDS) sh scripts/tsan_love.sh

SANITIZED_RUN = LUA_PATH="$$top/lua/?.lua;$$top/lua/?/init.lua;;" LUA_CPATH="$$top/build/sanitize/$(1)/?.so;;" \
	LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)" \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# (the threads' C tests too, with leak checks on: the specs run with them
# off, since a Lua state left open at exit is not a leak of the core's)
build/sanitize/test_threads: $(CORE_SRC) $(CORE_HDR) $(THREADS_TEST) csrc/test/test_threads.h
	@mkdir -p $(@D)
	$(CC) -std=c99 -O1 -g $(WARN) $(PLAT) $(SANITIZE) -D_DEFAULT_SOURCE -o $@ $(CORE_SRC) $(THREADS_TEST) -lm -ldl -lpthread

sanitize: deps build build/sanitize/test_core build/sanitize/test_threads build/sanitize/lua5.4/stagehand/_core.so build/sanitize/luajit/stagehand/_core.so
	./build/sanitize/test_core
	./build/sanitize/test_threads
	@top=$$(pwd); out=$$(mktemp -d); \
	( $(call SANITIZED_RUN,lua5.4) lua5.4 /usr/bin/busted -o utfTerminal spec >$$out/a 2>&1; echo $$? >$$out/a.rc ) & \
	( $(call SANITIZED_RUN,luajit) luajit /usr/bin/busted -o utfTerminal spec >$$out/b 2>&1; echo $$? >$$out/b.rc; \
	  $(call SANITIZED_RUN,luajit) STAGEHAND_BACKEND=c luajit /usr/bin/busted -o utfTerminal spec >$$out/c 2>&1; \
	  echo $$? >$$out/c.rc ); \
	wait; rc=0; \
	for run in "a lua5.4" "b luajit, ffi backend" "c luajit, C module"; do \
	  f=$${run%% *}; echo "== $${run#* }"; cat $$out/$$f; [ "$$(cat $$out/$$f.rc)" = 0 ] || rc=1; \
	done; rm -rf $$out; exit $$rc

# Memcheck over the C tests and the Lua 5.4 suite: any error, or memory
# definitely lost, fails the run.
VALGRIND := valgrind --quiet --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
	--show-leak-kinds=definite
valgrind: deps build build/test_core build/test_threads
	@EXTRA_PKGS=valgrind sh scripts/deps.sh
	$(VALGRIND) ./build/test_core
	$(VALGRIND) ./build/test_threads
	@top=$$(pwd); \
	LUA_PATH="$$top/lua/?.lua;$$top/lua/?/init.lua;;" LUA_CPATH="$$top/build/lua5.4/?.so;;" \
	$(VALGRIND) lua5.4 /usr/bin/busted -o utfTerminal spec

# The portable paths, forced and tested on Linux where they cannot be
# reached naturally (csrc/platform/sh_platform.h): a pipe made by pipe + fcntl,
# waits timed on the wall clock, and C11 atomics in place of the
# compiler's builtins (-std=c11, SH_NO_BUILTINS); then every .c file of the
# core and the module compiled as C++, as engines that build everything as
# C++ do.
FALLBACK_DEFS := -DSH_FORCE_FALLBACKS -DSH_NO_BUILTINS
build/fallback/test_core: $(CORE_SRC) $(CORE_HDR) $(TEST_SRC) csrc/test/fuzz_core.h
	@mkdir -p $(@D)
	$(CC) -std=c11 -O1 -g $(WARN) $(FALLBACK_DEFS) $(TEST_DEFS) -o $@ $(CORE_SRC) $(TEST_SRC) -lm -ldl -lpthread
build/fallback/test_threads: $(CORE_SRC) $(CORE_HDR) $(THREADS_TEST)
	@mkdir -p $(@D)
	$(CC) -std=c11 -O1 -g $(WARN) $(FALLBACK_DEFS) -D_DEFAULT_SOURCE -o $@ $(CORE_SRC) $(THREADS_TEST) -lm -ldl -lpthread
CXX_CHECK := c++ -x c++ -std=c++11 -fsyntax-only -Wall -Wextra -Werror
portable: deps build/fallback/test_core build/fallback/test_threads
	./build/fallback/test_core
	./build/fallback/test_threads
	$(CXX_CHECK) $(PLAT) $(CORE_SRC)
	$(CXX_CHECK) $(PLAT) -I$(INC_lua5.4) $(MODULE_SRC)
	$(CXX_CHECK) $(PLAT) -I$(INC_luajit) $(MODULE_SRC)

# Windows, cross-built with Debian's MinGW-w64 and run under wine: the
# core's C tests over the Win32 platform layer (csrc/platform/win/).
MINGW ?= x86_64-w64-mingw32-gcc
# (64-bit programs go straight to wine64: Debian's `wine` starts wine's
# 32-bit loader first, which a kernel without 32-bit support cannot run.
# scripts/wine_env.sh chooses, when the programs run: chosen here, the
# choice was made before `make test` had installed wine, and fell back on
# `wine`. WINE=... chooses by hand; 32-bit programs go through WINE32.)
WINE ?=
WINE32 ?= wine
export WINE WINE32
# (32-bit wine and MinGW too, for make windows-x86: installed with the
# rest, so that the wine prefix is made with both halves of wine there,
# and runs 32- and 64-bit programs alike. The prefix is stagehand's own,
# build/wine: a ~/.wine made before wine32:i386 came stopped loading
# 64-bit programs once it had.)
# (LuaJIT's 32-bit build runs 32-bit tools it builds first: the i686 Linux
# cross compiler makes them, and i386 libc runs them: X86_PKGS, make
# test-x86's. Not gcc-multilib, which Debian will not install beside the
# ARM cross compiler.)
# (qemu-user-static: LuaJIT's 32-bit build tools run under it where the
# kernel runs no 32-bit programs; scripts/x86_runs.sh asks.)
WIN_PKGS := gcc-mingw-w64-x86-64 wine64 wine gcc-mingw-w64-i686 wine32:i386 $(X86_PKGS)
export WINEPREFIX ?= $(CURDIR)/build/wine
build/windows/test_core.exe: $(WIN_CORE_SRC) $(CORE_HDR) $(TEST_SRC) csrc/test/fuzz_core.h
	@mkdir -p $(@D)
	$(MINGW) -std=c99 -O1 -g $(WARN) -DSH_DEBUG_CHECKS -DCORPUS_DIR='"csrc/test/corpus"' -o $@ $(WIN_CORE_SRC) $(TEST_SRC) -lws2_32
build/windows/test_threads.exe: $(WIN_CORE_SRC) $(CORE_HDR) $(THREADS_TEST)
	@mkdir -p $(@D)
	$(MINGW) -std=c99 -O1 -g $(WARN) -o $@ $(WIN_CORE_SRC) $(THREADS_TEST) -lws2_32
# The runtimes for Windows from Debian's sources and stagehand's DLLs for
# them, in build/windows/ (scripts/windows.sh), and the specs run there
# under wine (scripts/test_windows.sh): LuaJIT through both backends, Lua 5.4.
windows:
	@EXTRA_PKGS="$(WIN_PKGS)" sh scripts/deps.sh
	@MINGW="$(MINGW)" WARN="$(WARN)" WIN_SRC="$(WIN_CORE_SRC) $(MODULE_SRC)" sh scripts/windows.sh
# LuaJIT and stagehand for 32-bit Windows (LÖVE's win32 builds), in
# build/windows-x86/; their specs run under wine's 32-bit half.
windows-x86:
	@EXTRA_PKGS="$(WIN_PKGS)" sh scripts/deps.sh
	@WIN_ARCH=x86 MINGW=i686-w64-mingw32-gcc WARN="$(WARN)" WIN_SRC="$(WIN_CORE_SRC) $(MODULE_SRC)" sh scripts/windows.sh
# stagehand's C built as Microsoft's compiler builds it (scripts/msvc.sh
# says how, with no cl.exe here), for make windows' runtimes, in
# build/windows-msvc/; make test-msvc runs its C tests and its specs there.
MSVC_PKGS := clang lld llvm libwine-dev
windows-msvc: windows
	@EXTRA_PKGS="$(MSVC_PKGS)" sh scripts/deps.sh
	@WARN="$(WARN)" WIN_CORE_SRC="$(WIN_CORE_SRC)" MODULE_SRC="$(MODULE_SRC)" TEST_SRC="$(TEST_SRC)" \
	  THREADS_TEST="$(THREADS_TEST)" sh scripts/msvc.sh
test-msvc: windows-msvc
	@sh scripts/test_windows.sh msvc
test-windows: windows windows-x86 test-windows-c
	@sh scripts/test_windows.sh
test-windows-c:
	@EXTRA_PKGS="$(WIN_PKGS)" sh scripts/deps.sh
	$(MAKE) -s build/windows/test_core.exe build/windows/test_threads.exe
	top=$(CURDIR); . scripts/wine_env.sh; export WINEDEBUG=-all; \
	  $$wine build/windows/test_core.exe && $$wine build/windows/test_threads.exe

# The release rock (scripts/release_rock.sh): rockspec/stagehand-VERSION-1.rockspec
# from the checkout's, and build/rock/stagehand-VERSION-1.src.rock. The
# project's public git URL, once it has one, goes here and nowhere else.
ROCK_URL ?= git+https://stagehand.invalid/stagehand.git
rock:
	@EXTRA_PKGS=zip sh scripts/deps.sh
	@ROCK_URL="$(ROCK_URL)" sh scripts/release_rock.sh

# stagehand for LÖVE games as a folder to drop into a game's folder, and
# its zip (scripts/love_kit.sh): build/love-kit/stagehand and
# build/stagehand-VERSION-love.zip, with the cores for Linux and Windows.
love-kit: deps build $(KIT_CORE) $(KIT_CORE_ARM64) windows windows-x86
	@EXTRA_PKGS=zip sh scripts/deps.sh
	@KIT_WINDOWS=1 KIT_ARM64=1 sh scripts/love_kit.sh

# The kit's 64-bit ARM core under qemu (scripts/arm64_check.sh): make test
# runs a job, a pool and a port there; this runs every spec that runs off
# Linux's tools, on both backends (about 15 minutes).
test-arm64: deps $(KIT_CORE_ARM64)
	@sh scripts/arm64_check.sh --specs

# The kit on other Debian systems (scripts/systems_check.sh): Debian 11
# (glibc 2.31, LÖVE 11.3) and Debian 13 (LÖVE 11.5), debootstrapped into
# build/oldroot once. Needs root, and those suites on the package mirror:
# make test runs Debian 13's (the current stable) and checks the glibc
# versions the kit's cores ask for.
test-systems: deps build $(KIT_CORE)
	@sh scripts/systems_check.sh

# LÖVE in a web browser (scripts/browser_check.sh): spec/love_pure and
# examples/love packed by love.js (from the npm registry, which is why
# make test does not run this) and run in a headless Chromium, on the
# pure-Lua core.
test-browser: deps
	@sh scripts/browser_check.sh

# A LÖVE game folder that uses stagehand, packaged for players
# (scripts/love_dist.sh): build/love/NAME.love and a fused Linux build.
GAME ?= examples/love
love-dist: deps build $(KIT_CORE) $(KIT_CORE_ARM64)
	@sh scripts/love_dist.sh $(GAME)

# The shipped C with no warning (gcc, clang, MinGW-w64) and nothing found by
# the static analyzers of clang and gcc (scripts/c_checks.sh). make test runs it.
check-warnings:
	@EXTRA_PKGS="clang gcc-mingw-w64-x86-64" sh scripts/deps.sh
	@WARN="$(WARN)" PLAT="$(PLAT)" PORTABLE="$(PORTABLE_SRC)" MODULES="$(MODULE_SRC)" sh scripts/c_checks.sh

# (a /proc the systems check mounted in a root, left by a killed run, is
# unmounted first: rm must not walk into it. An unpacked root's proc may be
# a link to the system's own /proc, which is left alone.)
clean:
	@for m in build/oldroot/*/proc; do \
	  if [ ! -L "$$m" ] && mountpoint -q "$$m" 2>/dev/null; then umount "$$m"; fi; done
	rm -rf build
