#!/bin/sh
# Runs the C tests and the busted suite on each runtime named, then prints one
# line summing them all: "N passed, N failed". Exits non-zero on any failure.
#
# The sections run in two lanes side by side, one a core: the native lane
# (C tests, busted on each runtime and backend, the examples, the
# sanitizers, the rock) and the cross lane (Windows under wine, MinGW's
# builds and MSVC's, 32-bit x86 and ARM under qemu, LÖVE under Xvfb, the kit,
# Debian 13, and the failing allocator, for balance). No section of one lane touches what a section of the other
# builds or runs in (build/ folders, the wine prefix, X displays, LÖVE's
# save folder). The cross lane's output is kept and printed after the
# native lane's; the seeded scenes' ends are compared once both have ended.
# STAGEHAND_TEST_LANES=1 runs them one after the other.
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
passed=0
failed=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$work/out
ends=$work/ends
mkdir "$ends"
began=$(date +%s)
section_began=

# Each section's heading; the previous one's time is printed first, so a
# slow section shows where `make test`'s minutes go.
end_section() {
  [ -z "$section_began" ] || echo "   ($(( $(date +%s) - section_began )) s)"
  section_began=
}
heading() { # $1: label
  end_section
  section_began=$(date +%s)
  echo "== $1"
}

count() { # $1: label, then the command; busted's and the C tests' summaries are parsed
  label=$1; shift
  heading "$label"
  "$@" >"$out" 2>&1
  rc=$?
  cat "$out"
  p=$(grep -aoE '[0-9]+ success(es)?' "$out" | tail -1 | grep -oE '^[0-9]+')
  f=$(grep -aoE '[0-9]+ failures?' "$out" | tail -1 | grep -oE '^[0-9]+')
  e=$(grep -aoE '[0-9]+ errors?' "$out" | tail -1 | grep -oE '^[0-9]+')
  if [ -z "$p" ]; then
    p=$(grep -aoE '[0-9]+ passed, [0-9]+ failed' "$out" | tail -1 | sed 's/ passed.*//')
    f=$(grep -aoE '[0-9]+ passed, [0-9]+ failed' "$out" | tail -1 | sed 's/.*, //; s/ failed//')
  fi
  p=${p:-0}; f=${f:-0}; e=${e:-0}
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && [ "$e" -eq 0 ]; then
    echo "!! $label exited with status $rc"
    f=1
  fi
  passed=$((passed + p))
  failed=$((failed + f + e))
}

# One-line checks that are not busted specs: a command that must succeed.
check() { # $1: label, then the command
  label=$1; shift
  heading "$label"
  if "$@"; then passed=$((passed + 1)); else echo "!! $label failed"; failed=$((failed + 1)); fi
}

# Runs example $2 on runtime $1, then checks its output has a line matching
# each of the extended regular expressions that follow.
example_says() {
  rt=$1 example=$2
  shift 2
  "$rt" "$example" >"$out" 2>&1 || { cat "$out"; return 1; }
  for want in "$@"; do
    grep -Eq "$want" "$out" || { cat "$out"; echo "missing: $want"; return 1; }
  done
}

demo_ends_every_job() {
  eval "$(sh scripts/env.sh luajit)"
  rm -f build/scene_loader.trace.json
  example_says luajit examples/scene_loader.lua \
      "Loading knight.portrait +failed +Loading knight.portrait failed: knight.portrait: not a portrait asset" \
      "Loading tavern.stream +stalled +Loading tavern.stream made no progress for 1.5 s." \
      "Loading hero.sprite +done .*sum=332c9569" "Preparing the scene: done, 6 of 8 assets loaded" \
      "each decode ran on one of 2 worker threads" "each asset loaded once for 10 entities: yes" \
      "^placed: .*knight's dialogue \(stand-in for knight.portrait\)" \
      "^phase +start ms +end ms +busy ms +spans +tasks +failed$" "^decode +[0-9.]+ +[0-9.]+ " \
      "^upload +.* 6 +0$" "trace written to .*scene_loader.trace.json" \
      "decode slots went to: (knight|queen)\.portrait, (knight|queen)\.portrait(, (floor\.tiles|goblin\.sprite|hero\.sprite|water\.shader)){4}, (tavern\.stream|torch\.sound), (tavern\.stream|torch\.sound)$" ||
    return 1
  # (the trace is JSON a viewer opens: every event has the fields one needs)
  luajit -e '
    local cjson = require "cjson"
    local f = assert(io.open("build/scene_loader.trace.json"))
    local doc = cjson.decode(f:read("*a"))
    local n = 0
    for _, e in ipairs(doc.traceEvents) do
      assert(e.ph and e.name and e.pid and e.tid and (e.ph == "M" or e.ts), "an event without ph, name, pid, tid, ts")
      n = n + 1
    end
    assert(n > 50, "only " .. n .. " events")' || { echo "the demo's trace is not a Chrome trace"; return 1; }
  echo "the example scene loader ended every job: 6 done, 1 failed, 1 stalled"
}

# The streaming world runs on a frame clock, so its output is the same on
# every runtime: nearest chunks finalize first, two a frame, the slow chunk
# is dropped, the corrupt one fails, the preloader runs only when idle.
world_streams_on() ( # $1: runtime (a subshell: its environment stays here)
  eval "$(sh scripts/env.sh "$1")"
  example_says "$1" examples/streaming_world.lua \
      "^frame   5  finalized chunk 2 \(visible\); finalized chunk 1 \(visible\)$" \
      "^frame   6  finalized chunk 3 \(scene\); finalized chunk 4 \(background\)$" \
      "dropped chunk 6: out of range" "chunk 11 failed: checksum mismatch" \
      "^chunks: 1=done 2=done 3=done 4=done 5=done 6=cancelled 7=done 8=done 9=done 10=done 11=failed 12=done 13=done 14=done 15=done 16=done$" \
      "^at most 2 chunks finalized in one frame" "^every chunk loaded at most once" \
      "^preloaded 4 sounds, each while no chunk was loading: .* \(done\)$" ||
    return 1
  echo "nearest chunks first, two a frame; chunk 6 dropped, chunk 11 failed; 4 sounds preloaded while idle"
)

# The modder's preload runs on a frame clock too: same output everywhere.
mod_preloads_on() ( # $1: runtime
  eval "$(sh scripts/env.sh "$1")"
  example_says "$1" examples/mod_preload.lua \
      "^frame  5  reading level/music.ogg \(scene\)$" \
      "^frame  7  the game is idle: the mod preloads mod/banner.png$" \
      "^frame 10  reading mod/armor.mesh \(visible\)$" "^frame 13  reading mod/horn.ogg \(background\)$" \
      "^frame 30  banner: done, at once \(mod/banner.png bytes\)$" "^every file was read once$" ||
    return 1
  echo "the mod preloaded while idle; the game's ask raised the armor ahead; the banner came from memory"
)

# examples/c_host: a C program embedding the runtime runs the frame loop.
c_host_runs_on() ( # $1: runtime (luajit, lua5.4 or lua5.3)
  eval "$(sh scripts/env.sh "$1")"
  example_says "build/c_host/host_$1" examples/c_host/game.lua \
      "^Loading castle.mesh +done: castle.mesh decoded \(100246\)$" \
      "^loaded 5 of 5 in [0-9]+ frames \([0-9]+ ms\); at most [12] finalized in one frame$" \
      "^host: [0-9]+ frames, slept between [0-9]+ of them" ||
    return 1
  echo "a C host embedding $1 stepped stagehand once a frame and slept by next_wake: 5 of 5 loaded"
)

sanitized() {
  make -s sanitize >"$out" 2>&1 || { cat "$out"; return 1; }
  grep -aE "passed|successes" "$out" | sed 's/^/  /'
}

threads_under_tsan() {
  make -s tsan >"$out" 2>&1 || { cat "$out"; return 1; }
  grep -aE "passed|successes" "$out" | sed 's/^/  /'
}

# The engines that link Lua and stagehand's core into themselves: no
# LUA_CPATH, so the core can only come from the program (package.preload).
c_host_static_runs_on() ( # $1: runtime, $2: the backend it must run
  export LUA_PATH="$top/lua/?.lua;$top/lua/?/init.lua;;" LUA_CPATH=";;"
  example_says "build/c_host/host_static_$1" examples/c_host/game.lua "^stagehand on the $2 backend$" \
      "^loaded 5 of 5 in [0-9]+ frames" || return 1
  echo "a C host linking $1 and stagehand's core statically ran on the $2 backend: 5 of 5 loaded"
)
c_host_without_exports_is_told() (
  eval "$(sh scripts/env.sh lua5.4)"
  if build/c_host/host_noexport_lua5.4 examples/c_host/game.lua >"$out" 2>&1; then cat "$out"; return 1; fi
  grep -q "needs lua_[a-z_]* from the Lua the program runs, and the program does not export it: a program that links Lua statically must export its symbols (link it with -Wl,-E" "$out" ||
    { cat "$out"; return 1; }
  echo "a host linking Lua statically without exporting it is told the symbol and the fix"
)

# The busted suite on one runtime: through its native core (LuaJIT through
# both backends), then on the pure-Lua core, what runs where no native core
# loads: every spec but the worker threads' (which need the native core).
# (The seeded scenes, chaos, callback and the models', write how each of
# their Handles ended to $ends/<run>; once both lanes have ended,
# scripts/same_ends.sh compares the runs.)
busted_on() { # $1: runtime
  rt=$1
  eval "$(sh scripts/env.sh "$rt")"
  count "busted on $rt ($(sh -c "$rt -v 2>&1" | head -1))" \
    env STAGEHAND_ENDS="$ends/$rt" "$rt" /usr/bin/busted -o utfTerminal spec
  if [ "$rt" = luajit ]; then
    count "busted on luajit through the C module (STAGEHAND_BACKEND=c)" \
      env STAGEHAND_ENDS="$ends/luajit-c" STAGEHAND_BACKEND=c luajit /usr/bin/busted -o utfTerminal spec
  fi
}
busted_on_pure() { # $1: runtime
  rt=$1
  eval "$(sh scripts/env.sh "$rt")"
  lua_core_specs=$(ls spec/*_spec.lua | grep -v -e hosted_spec -e love_channels_spec -e ports_spec -e threads_spec \
    -e request_priority_spec -e offer_model_spec)
  # shellcheck disable=SC2086
  count "busted on $rt on the pure-Lua core (STAGEHAND_BACKEND=lua), every spec but the worker threads'" \
    env STAGEHAND_ENDS="$ends/$rt-lua" STAGEHAND_BACKEND=lua "$rt" /usr/bin/busted -o utfTerminal $lua_core_specs
}

# The whole suite runs on the pure-Lua core on these; on Lua 5.3 and 5.2
# spec/lua_core_spec.lua checks it inside the native runs (the same random
# calls made of both cores, every answer compared), which keeps make test
# within its 15 minutes.
PURE_RUNTIMES="luajit lua5.4 lua5.1"

# The native lane: what runs on this system's own runtimes.
native_lane() {
  count "C core tests" ./build/test_core
  count "C threads tests (messages, notifiers, ports, round barriers, work queues)" ./build/test_threads
  count "the core's portable paths forced (pipe + fcntl, wall-clock waits, C11 atomics), then every .c as C++" \
    make -s portable
  for rt in "$@"; do
    busted_on "$rt"
  done
  for rt in "$@"; do
    case " $PURE_RUNTIMES " in *" $rt "*) busted_on_pure "$rt" ;; esac
  done
  check "luacheck (.luacheckrc): no warnings in lua/, spec/, bench/, examples/ and scripts/textures/" luacheck -q lua spec bench examples scripts/textures
  check "the shipped C: no warning from gcc, clang or MinGW-w64 (-Wall -Wextra ... -Werror), nothing from clang's or gcc's analyzer" \
    make -s check-warnings
  check "pools destroyed under the luv driver, then exit without closing: exit 0, 20 runs per runtime and backend" \
    sh scripts/exit_check.sh "$@"
  check "make demo: the example scene loader" demo_ends_every_job
  check "a core exporting only luaopen: LuaJIT names the missing function and says once that it runs the C module" \
    sh scripts/ffi_fallback_check.sh
  check "examples/c_host on LuaJIT" c_host_runs_on luajit
  check "examples/c_host linking LuaJIT and the core statically: the FFI backend finds the core in the program" \
    c_host_static_runs_on luajit ffi
  check "examples/c_host linking Lua 5.4 and the core statically: the C module from package.preload" \
    c_host_static_runs_on lua5.4 c
  check "a host that links Lua statically without -Wl,-E is told what is missing and how to fix it" \
    c_host_without_exports_is_told
  check "examples/c_host on Lua 5.4" c_host_runs_on lua5.4
  check "examples/c_host on Lua 5.3" c_host_runs_on lua5.3
  for rt in "$@"; do
    check "the example streaming world on $rt" world_streams_on "$rt"
    check "the example mod preload on $rt" mod_preloads_on "$rt"
  done
  check "make sanitize: C tests, then specs on Lua 5.4 and LuaJIT (both backends) under ASan and UBSan" sanitized
  check "make tsan: the threads' C tests, then the thread specs on Lua 5.4, under ThreadSanitizer" threads_under_tsan
  check "the release rockspec is what make rock makes of the checkout's" \
    env ROCK_URL=git+https://stagehand.invalid/stagehand.git sh scripts/release_rock.sh --check
  check "luarocks make of the rockspec, and luarocks install of the release's source rock, into temporary trees" \
    sh scripts/rock.sh "$@"
}

# The cross lane: other systems (Windows under wine, MinGW's builds and
# MSVC's; 32-bit x86 and ARM under qemu; Debian 13 in a chroot) and LÖVE
# under Xvfb. The Windows builds come before the kit, which ships their
# cores.
cross_lane() {
  # (The failing allocator runs in this lane, the shorter of the two: it
  # reads only build/oom*, made before the lanes start, which the native
  # lane never touches.)
  count "the core's C allocations refused, each in turn, under ASan and UBSan: every structure says so and stays whole, nothing leaks" \
    ./build/oom_core
  count "under a failing allocator, every allocation of each operation in turn, Lua's and the core's: Lua 5.4, LuaJIT (C module, FFI, pure-Lua core) and 5.1; the core, worker pools' main side, the luv driver" \
    sh scripts/oom.sh
  count "the core's C tests on Windows: cross-built with MinGW-w64, run under wine" make -s test-windows-c
  count "the specs on Windows under wine: LuaJIT (both backends) and Lua 5.4, and 32-bit LuaJIT (both backends) where this kernel runs 32-bit programs, cross-built from Debian's sources" \
    sh -c 'make -s windows windows-x86 >/dev/null && sh scripts/test_windows.sh'
  check "Windows: a core built for another Lua is refused before it loads (it would crash the program), and the pure-Lua core runs" \
    sh scripts/win_foreign_core_check.sh
  count "Windows, the core as Visual Studio builds it (clang in MSVC's dialect and ABI, Microsoft's UCRT; no cl.exe runs here): its C tests, then the specs on Lua 5.4, and the core's and the seeded scenes' on LuaJIT (the FFI backend it chooses), under wine" \
    sh -c 'make -s windows-msvc >/dev/null && sh scripts/test_windows.sh msvc'
  count "spec/love: worker pools on love.thread, under Xvfb" sh scripts/love_specs.sh
  count "spec/love again, against a core built with ASan and UBSan (make sanitize-love)" make -s sanitize-love
  count "spec/love with LuaJIT's compiler off, as LÖVE runs on ARM: the native core through the C module" \
    env STAGEHAND_JIT=off sh scripts/love_specs.sh
  count "spec/love on the pure-Lua core (STAGEHAND_BACKEND=lua): worker pools on love.thread with no native core" \
    env STAGEHAND_BACKEND=lua sh scripts/love_specs.sh
  count "spec/love_pure: a LÖVE game with no native core runs a loading scene and a pool on the pure-Lua core, under Xvfb" \
    sh scripts/love_specs.sh spec/love_pure
  count "spec/love_busted: the thread specs (pools, ports, request priorities, the offer model) under busted inside LÖVE, their workers LÖVE threads" \
    sh scripts/love_specs.sh spec/love_busted
  count "spec/love_busted on the pure-Lua core: the same specs with no native core, as on a phone" \
    env STAGEHAND_BACKEND=lua sh scripts/love_specs.sh spec/love_busted
  count "spec/love_luv: luv's loop steps an orchestrator inside LÖVE, a worker's reply waking it (its notifier's descriptor)" \
    sh scripts/love_specs.sh spec/love_luv
  count "spec/love_luv on the pure-Lua core: the same, a reply waking it with no descriptor to poll" \
    env STAGEHAND_BACKEND=lua sh scripts/love_specs.sh spec/love_luv
  check "examples/love: LÖVE 11 under Xvfb, a loading screen and the scene, both screenshots not blank, on worker threads (the native core's, the pure-Lua core's) and on the main thread without love.thread" \
    sh scripts/love_check.sh
  check "docs/guide.md's LÖVE programs, copied as written into games of real PNGs (one corrupt), under Xvfb, on the native and the pure-Lua core" \
    sh scripts/guide_love_check.sh
  check "make love-dist: examples/love as a .love and a fused build, run from /tmp with no environment, then again over the stale core an older build left in the save directory" \
    sh scripts/love_dist_check.sh
  check "make love-kit: its folder dropped into a game run from /tmp with no environment; its Windows cores under wine (the 32-bit one where this kernel runs 32-bit programs)" \
    sh scripts/love_kit_check.sh
  check "the kit's 64-bit ARM Linux core under qemu: a job, a pool of 2 threads and a port, on both backends" \
    sh scripts/arm64_check.sh
  check "the kit on Debian 13, debootstrapped: its core on both backends, examples/love and the LÖVE specs in LÖVE 11.5, on the native and the pure-Lua core" \
    env SYSTEMS=trixie sh scripts/systems_check.sh
  count "the specs on 32-bit x86 Linux (x87 maths): the core's C tests, then Lua 5.4 from Debian's sources, natively or under qemu" \
    make -s test-x86
}

# What the lanes fetch with apt comes first, one thing at a time (two
# apt-get runs at once fight over dpkg's lock): Debian's sources of LuaJIT
# and Lua 5.4, for the Windows and 32-bit x86 builds. (make test has
# installed the packages of both lanes before this script.)
sh scripts/win_sources.sh build/windows/src >/dev/null ||
  { echo "!! could not fetch Debian's sources of LuaJIT and Lua 5.4"; exit 1; }

lanes=${STAGEHAND_TEST_LANES:-2}
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
if [ "$lanes" -ge 2 ] && [ "$cores" -ge 2 ]; then
  echo "(two lanes side by side: the cross lane's sections, the failing allocator, Windows, 32-bit x86 and ARM, LÖVE and the kit, print after these)"
  # (the cross lane counts in its own subshell and hands its counts back
  # through cross.counts)
  # shellcheck disable=SC2030,SC2031
  (
    passed=0 failed=0 section_began='' out=$work/out.cross
    cross_lane
    end_section
    echo "$passed $failed $(date +%s)" >"$work/cross.counts"
  ) >"$work/cross.log" 2>&1 &
  cross=$!
  native_lane "$@"
  end_section
  native_took=$(( $(date +%s) - began ))
  wait "$cross"
  took=
  read -r p f cross_ended <"$work/cross.counts" && took=", took $((cross_ended - began)) s"
  echo "== the cross lane, run beside the native lane ($native_took s)$took:"
  cat "$work/cross.log"
  # shellcheck disable=SC2031
  if [ -n "$took" ]; then
    passed=$((passed + p))
    failed=$((failed + f))
  else
    echo "!! the cross lane ended without its counts"
    failed=$((failed + 1))
  fi
else
  native_lane "$@"
  cross_lane
  end_section
fi
# (after both lanes: each lane's runs recorded their ends)
check "the seeded scenes (chaos, callback, models) end alike on every runtime and backend" sh scripts/same_ends.sh "$ends"
end_section
echo "all sections: $(( $(date +%s) - began )) s"
echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
