#!/bin/sh
# make test's check of make love-kit, as a developer who builds nothing
# uses it:
# - the zip holds the folder, the four cores, the LICENSE, the README.txt,
#   the guide, the reference, the LuaLS types and the core's sources, and
#   its src/build.sh builds a core that runs (a pool, a job, a port), and
#   on a (stand-in) Mac one universal core for both kinds of Mac;
# - the kit's Linux cores (x86-64 and 64-bit ARM) ask for no glibc newer
#   than 2.17;
# - its folder dropped into a copy of examples/love (which carries none),
#   run as a folder (love DIR) from another working directory with no
#   LUA_PATH or LUA_CPATH, headless under Xvfb, with a fresh save
#   directory, loads every texture on the FFI backend; without the core
#   for this system it says which cores it has;
# - its Windows cores, stripped as they ship, load under wine in the
#   LuaJITs that make windows and make windows-x86 built, and run a job
#   (the 32-bit one a pool and a port too), on both backends, also from a
#   save directory beyond ASCII.
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
# shellcheck source=scripts/wine_env.sh
. "$top/scripts/wine_env.sh"
fail() { echo "love-kit check: $1"; exit 1; }
KIT_WINDOWS=1 KIT_ARM64=1 sh scripts/love_kit.sh || fail "make love-kit failed"
version=$(sed -n 's/^M.VERSION = "\([^"]*\)".*/\1/p' lua/stagehand/init.lua)
zip=build/stagehand-$version-love.zip
list=$(unzip -l "$zip") || fail "$zip is not a zip"
for f in stagehand/init.lua stagehand/love.lua stagehand/threads/love_threads.lua \
    stagehand/native/linux-x64/_core.so stagehand/native/linux-arm64/_core.so stagehand/native/windows-x64/_core.dll \
    stagehand/native/windows-x86/_core.dll \
    LICENSE README.txt docs/guide.md docs/reference.md types/stagehand.lua src/build.sh src/include/lua.h \
    src/include/COPYRIGHT.LuaJIT src/csrc/core/stagehand.h; do
  echo "$list" | grep -q " stagehand-$version-love/$f\$" || fail "$zip has no $f"
done
# (the kit's Linux core loads on glibc 2.17 and later: make test-systems
# runs it on Debian 11's)
for sys in linux-x64 linux-arm64; do
  linux=build/love-kit/stagehand/native/$sys/_core.so
  dump=objdump
  [ "$sys" = linux-arm64 ] && dump=aarch64-linux-gnu-objdump
  newest=$($dump -T "$linux" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)
  [ "$(printf '%s\n2.17\n' "$newest" | sort -V | tail -1)" = 2.17 ] ||
    fail "the kit's $sys core asks for glibc $newest; it must ask for nothing newer than 2.17"
  for lib in libpthread.so.0 libdl.so.2; do
    $dump -p "$linux" | grep -q "NEEDED *$lib" || fail "the kit's $sys core does not name $lib, where old glibc has threads"
  done
done
# (src/build.sh, as a developer on a system the kit has no core for runs
# it: from the unzipped kit, with that system's core taken out)
unz=$(mktemp -d)
trap 'rm -rf "$unz"' EXIT
(cd "$unz" && unzip -q "$top/$zip")
kit_dir=$unz/stagehand-$version-love
rm -rf "$kit_dir/stagehand/native/linux-x64"
built=$(sh "$kit_dir/src/build.sh") || fail "the kit's src/build.sh failed"
[ "$built" = "stagehand/native/linux-x64/_core.so" ] || fail "src/build.sh wrote $built"
mkdir -p "$unz/run/stagehand"
cp "$kit_dir/stagehand/native/linux-x64/_core.so" "$unz/run/stagehand/_core.so"
for be in ffi c; do
  out=$(cd "$unz/run" && env -u LUA_CPATH STAGEHAND_BACKEND=$be LUA_PATH="$top/lua/?.lua;$top/lua/?/init.lua" \
    LUA_CPATH="./?.so" luajit "$top/scripts/kit_smoke.lua" 2>&1)
  [ "$out" = "$be x64 2870 done 42" ] || fail "the core src/build.sh built, $be backend, said: $out"
done
# (on a Mac, src/build.sh makes one universal core and writes it for both
# kinds of Mac. No Mac here: uname and Apple's compiler driver are played
# by stand-ins that say Darwin and arm64, take -arch and -bundle as
# Apple's does, and build for this system; one that refuses two -arch
# flags plays an older compiler)
fake="$unz/fake-mac"
mkdir -p "$fake"
cat >"$fake/uname" <<'SH'
#!/bin/sh
case "$1" in -s) echo Darwin ;; -m) echo arm64 ;; *) exec /bin/uname "$@" ;; esac
SH
cat >"$fake/cc" <<'SH'
#!/bin/sh
archs=0
for a in "$@"; do [ "$a" = -arch ] && archs=$((archs + 1)); done
[ "$archs" -gt 1 ] && [ "${ONE_ARCH:-0}" = 1 ] && { echo "cc: one -arch only" >&2; exit 1; }
for a in "$@"; do
  shift
  case "$a" in
    -arch | -undefined) skip=1; continue ;;
    -bundle) set -- "$@" -shared; continue ;;
  esac
  [ "${skip:-0}" = 1 ] && { skip=0; continue; }
  set -- "$@" "$a"
done
echo "$archs" >>"$(dirname "$0")/archs"
exec gcc "$@"
SH
chmod +x "$fake/uname" "$fake/cc"
rm -rf "$kit_dir/stagehand/native/osx-"*
built=$(PATH="$fake:$PATH" CC="$fake/cc" sh "$kit_dir/src/build.sh") || fail "src/build.sh on a (stand-in) Mac failed"
[ "$(echo $built)" = "stagehand/native/osx-arm64/_core.so stagehand/native/osx-x64/_core.so" ] ||
  fail "src/build.sh on a Mac wrote $built"
[ "$(tail -1 "$fake/archs")" = 2 ] || fail "src/build.sh on a Mac did not ask for two architectures"
cmp -s "$kit_dir/stagehand/native/osx-arm64/_core.so" "$kit_dir/stagehand/native/osx-x64/_core.so" ||
  fail "src/build.sh on a Mac wrote two different cores"
[ ! -e "$kit_dir/stagehand/native/.universal.so" ] || fail "src/build.sh left its universal core behind"
cp "$kit_dir/stagehand/native/osx-x64/_core.so" "$unz/run/stagehand/_core.so"
out=$(cd "$unz/run" && STAGEHAND_BACKEND=ffi LUA_PATH="$top/lua/?.lua;$top/lua/?/init.lua" LUA_CPATH="./?.so" \
  luajit "$top/scripts/kit_smoke.lua" 2>&1)
[ "$out" = "ffi x64 2870 done 42" ] || fail "the core src/build.sh built as a Mac's said: $out"
rm -rf "$kit_dir/stagehand/native/osx-"*
out=$(PATH="$fake:$PATH" CC="$fake/cc" ONE_ARCH=1 sh "$kit_dir/src/build.sh" 2>&1) ||
  fail "src/build.sh with a compiler that makes no universal core failed: $out"
printf '%s\n' "$out" | grep -q "made no universal core" || fail "src/build.sh did not say it built for one kind of Mac: $out"
[ "$(printf '%s\n' "$out" | tail -1)" = "stagehand/native/osx-arm64/_core.so" ] && [ ! -e "$kit_dir/stagehand/native/osx-x64" ] ||
  fail "src/build.sh with one architecture wrote: $out"
game=$(mktemp -d)
trap 'rm -rf "$unz" "$game"' EXIT
cp -R examples/love/. "$game/"
[ ! -e "$game/stagehand" ] || fail "examples/love carries a stagehand folder of its own"
cp -R build/love-kit/stagehand "$game/stagehand"
save=${XDG_DATA_HOME:-$HOME/.local/share}
rm -rf "$save/love/stagehand-love-example" "$save/stagehand-love-example"
out=$(cd /tmp && env -u LUA_PATH -u LUA_CPATH timeout 120 xvfb-run -a love "$game" --screenshot "$game/shot.png" 2>&1)
printf '%s\n' "$out" | grep -v "^$" | sed 's/^/  /'
printf '%s\n' "$out" | grep -q "on the ffi backend" || fail "the game folder did not run on the FFI backend"
printf '%s\n' "$out" | grep -Eq "^loaded 12 of 14 textures \(2 stand-ins\)" || fail "the game folder did not load every texture"
# (a kit without this system's core, as a Mac developer would run one
# made here: the game runs on the pure-Lua core, says once why, naming
# the systems the kit has and the fix, and still decodes on LÖVE's threads)
rm -rf "$game/stagehand/native/linux-x64" "$save/love/stagehand-love-example" "$save/stagehand-love-example"
out=$(cd /tmp && env -u LUA_PATH -u LUA_CPATH timeout 120 xvfb-run -a love "$game" --screenshot "$game/shot.png" 2>&1)
printf '%s\n' "$out" | grep -Fq "runs on its pure-Lua core: jobs, keys, priorities, slots, budgets and stall clocks work, and worker pools, ports and round barriers run on LÖVE's threads; the native core did not load: stagehand: cannot find its native core (stagehand/_core.so) for linux-x64. The game carries cores for linux-arm64, windows-x64, windows-x86 under stagehand/native/, but none for linux-x64" ||
  fail "a kit without this system's core did not say why it runs on the pure-Lua core: $out"
printf '%s\n' "$out" | grep -q "on the lua backend" || fail "a kit without this system's core did not run on the pure-Lua core: $out"
printf '%s\n' "$out" | grep -Eq "^loaded 12 of 14 textures \(2 stand-ins\); decoded on [0-9]+ LÖVE worker thread" ||
  fail "a kit without this system's core did not decode on LÖVE's threads: $out"
# (the Windows cores as they ship: stripped, their exports whole. Each
# runs in a folder of its own with the LuaJIT of its width, and again from
# a save directory beyond ASCII: LÖVE's save directory, where the core is
# written, is a path LuaJIT's own calls cannot name on Windows. There LÖVE
# is played by a stand-in that says the core is there.)
win_tree() { # $1: the LuaJIT's build folder, $2: the kit's system; prints the folder
  d=$(mktemp -d)
  cp "$1/luajit.exe" "$1/lua51.dll" scripts/kit_smoke.lua "$d/"
  mkdir -p "$d/lua" "$d/stagehand" "$d/save/Łukasz/stagehand"
  cp -R lua/stagehand "$d/lua/"
  cp "build/love-kit/stagehand/native/$2/_core.dll" "$d/stagehand/_core.dll"
  cp "build/love-kit/stagehand/native/$2/_core.dll" "$d/save/Łukasz/stagehand/_core.dll"
  cat >"$d/wide.lua" <<'LUA'
local save = "Z:SAVE_DIR" -- (UTF-8, as LÖVE gives paths; written in here, since wine
-- hands the environment to the ANSI getenv in the system's code page)
love = { filesystem = {
  getInfo = function(p) if p == "stagehand/_core.dll" then return { type = "file" } end end,
  getRealDirectory = function() return save end,
  getSourceBaseDirectory = function() return "Z:/nowhere" end,
  getDirectoryItems = function() return {} end,
} }
package.path, package.cpath = "lua/?.lua;lua/?/init.lua", ""
local stagehand = require "stagehand"
local orch = stagehand.new { driver = "manual" }
local st, v = orch:wait(orch:run("a job", function(job) job:sleep(1) return 42 end), 5000)
print(stagehand.backend, st, v)
LUA
  sed -i "s|SAVE_DIR|$d/save/Łukasz|" "$d/wide.lua"
  echo "$d"
}
in_wine() { # $1: the folder, then the environment and arguments for luajit.exe
  d=$1
  shift
  # (wine's own complaint about its server, "wine client error:...", which
  # WINEDEBUG does not silence, is left out: once in a few runs one came
  # after the right output. Anything else on stderr stays in and fails the
  # check: the program's or the kit's words, and a crash wine reports.)
  (cd "$d" && env -u LUA_PATH -u LUA_CPATH WINEDEBUG=-all "$@" 2>&1 | tr -d '\r' |
    grep -av '^wine client error:')
}
win=$(win_tree build/windows windows-x64)
win32=$(win_tree build/windows-x86 windows-x86)
trap 'rm -rf "$unz" "$game" "$win" "$win32"' EXIT
out=$(in_wine "$win" timeout 120 $wine luajit.exe -e '
  local stagehand = require "stagehand"
  local orch = stagehand.new { driver = "manual" }
  local h = orch:run("a job", function(job) job:sleep(1) return 42 end)
  local st, v = orch:wait(h, 5000)
  print(stagehand.backend, st, v)')
[ "$out" = "ffi	done	42" ] || fail "the kit's Windows core under wine said: $out"
# (the 32-bit one, for LÖVE's 32-bit Windows builds, links no MinGW DLL)
i686-w64-mingw32-objdump -p "$win32/stagehand/_core.dll" | grep -q "DLL Name: libgcc" &&
  fail "the kit's 32-bit Windows core needs MinGW's libgcc DLL, which a game does not have"
# (from the save directory beyond ASCII; the 32-bit core's wide calls are
# the system's __stdcall ones)
wide() { # $1: the folder, $2: how wine is run, $3: what it is, for the failure
  for be in ffi c; do
    out=$(in_wine "$1" LC_ALL=C.UTF-8 STAGEHAND_BACKEND=$be timeout 120 $2 luajit.exe wide.lua)
    [ "$out" = "$be	done	42" ] ||
      fail "the kit's $3 core in a save directory beyond ASCII, $be backend, under wine said: $out"
  done
}
wide "$win" "$wine" Windows
# (A kernel that runs no 32-bit programs runs no 32-bit wine: then the
# 32-bit core is checked for what it links, above, and not run.)
if sh scripts/x86_runs.sh; then
  ran32=" (32-bit too)"
  # (under wine's 32-bit half with a 32-bit LuaJIT: a pool of two worker
  # threads, a port, a job)
  for be in ffi c; do
    out=$(in_wine "$win32" STAGEHAND_BACKEND=$be timeout 120 ${WINE32:-wine} luajit.exe kit_smoke.lua)
    printf '%s\n' "$out" | grep -q "^$be x86 .* done 42$" || fail "the kit's 32-bit Windows core, $be backend, under wine said: $out"
  done
  wide "$win32" "${WINE32:-wine}" "32-bit Windows"
else
  ran32=" (not the 32-bit one: this kernel runs no 32-bit programs)"
fi
echo "the kit ran as a game's folder from /tmp with no environment, and its stripped Windows cores under wine$ran32, from a save directory beyond ASCII too"
