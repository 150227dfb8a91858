#!/bin/sh
# make test-windows: stagehand's specs on Windows, under wine, through
# scripts/spec_runner.lua (busted's own C helpers are not built for
# Windows): LuaJIT through both backends, and Lua 5.4. Specs that check
# the source tree or Linux tools (docs, module and rockspec, shape, luv,
# lua-cjson) stay with the Linux runs. Prints "N passed, N failed".
# `test_windows.sh msvc` (make test-msvc): the same on the cores built as
# Microsoft's compiler builds them (make windows-msvc), and their C tests.
top=$(cd "$(dirname "$0")/.." && pwd)
flavour=${1:-mingw}
dir=$top/build/windows
[ "$flavour" = msvc ] && dir=$top/build/windows-msvc
cd "$dir" || exit 1
rm -rf spec csrc
mkdir -p spec csrc
cp "$top"/spec/*.lua spec/
cp -r "$top/spec/fixtures" spec/
mkdir -p csrc/core
cp "$top"/csrc/core/*.h csrc/core/ # (the cdef and status specs read the header)
cp "$top/scripts/spec_runner.lua" .
files=""
for f in spec/*_spec.lua; do
  case "$f" in
    spec/docs_spec.lua | spec/module_spec.lua | spec/shape_spec.lua | spec/luv_spec.lua | spec/trace_spec.lua) ;;
    *) files="$files $f" ;;
  esac
done
export WINEDEBUG=-all
# (wine hands the environment on: the Linux paths `eval "$(make -s env)"`
# sets would point the Windows runtimes at Linux's cores)
unset LUA_PATH LUA_CPATH LUA_PATH_5_4 LUA_CPATH_5_4
# shellcheck source=scripts/wine_env.sh
. "$top/scripts/wine_env.sh"
wine32=${WINE32:-wine} # (32-bit programs: wine's 32-bit half)
passed=0
failed=0
run() { # $1: label, then the command
  label=$1
  shift
  echo "== $label"
  out=$("$@" 2>&1)
  rc=$?
  printf '%s\n' "$out" | grep -v '^\.*$' | tail -40
  p=$(printf '%s\n' "$out" | grep -aoE '[0-9]+ passed, [0-9]+ failed' | tail -1 | sed 's/ passed.*//')
  f=$(printf '%s\n' "$out" | grep -aoE '[0-9]+ passed, [0-9]+ failed' | tail -1 | sed 's/.*, //; s/ failed//')
  [ -z "$p" ] && { p=0; f=1; echo "!! $label: no summary"; }
  # (a program that fails after its summary, a crash at exit, fails too)
  [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && { f=1; echo "!! $label exited with status $rc"; }
  passed=$((passed + p))
  failed=$((failed + f))
}
if [ "$flavour" = msvc ]; then
  # (the C tests read their fuzz corpus from the top of the tree)
  run "Windows, built as MSVC builds it: the core's C tests" env -C "$top" "$wine" "$dir/test_core.exe"
  run "Windows, built as MSVC builds it: the threads' C tests" "$wine" test_threads.exe
  # (LuaJIT chooses the FFI backend, as it does with MinGW's DLL: the
  # functions SH_API marks are exported from cl.exe's DLL too. Lua 5.4's
  # run below goes through all of the DLL's code; this one through the FFI's
  # calls into it: the core's specs and the seeded scenes.)
  run "Windows, built as MSVC builds it: LuaJIT, the backend it chooses" "$wine" luajit.exe spec_runner.lua \
    '--lua-dir=Z:\usr\share\lua\5.1' spec/cdef_spec.lua spec/core_spec.lua spec/chaos_spec.lua \
    spec/stall_model_spec.lua spec/grant_model_spec.lua spec/priority_model_spec.lua
  if ! printf '%s\n' "$out" | grep -q '^\[stagehand.testing\] LuaJIT 2\.1[^,]*, ffi backend'; then
    echo "!! LuaJIT did not choose the FFI backend: the DLL does not export the core's functions"
    failed=$((failed + 1))
  fi
  # shellcheck disable=SC2086
  run "Windows, built as MSVC builds it: Lua 5.4" "$wine" lua5.4/lua54.exe spec_runner.lua \
    '--lua-dir=Z:\usr\share\lua\5.4' $files
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
  exit
fi
# shellcheck disable=SC2086
run "Windows: LuaJIT, FFI backend" env STAGEHAND_BACKEND=ffi "$wine" luajit.exe spec_runner.lua \
  '--lua-dir=Z:\usr\share\lua\5.1' $files
# shellcheck disable=SC2086
run "Windows: LuaJIT, C module" env STAGEHAND_BACKEND=c "$wine" luajit.exe spec_runner.lua \
  '--lua-dir=Z:\usr\share\lua\5.1' $files
# shellcheck disable=SC2086
run "Windows: Lua 5.4" "$wine" lua5.4/lua54.exe spec_runner.lua '--lua-dir=Z:\usr\share\lua\5.4' $files

# 32-bit Windows (make windows-x86): LuaJIT through both backends, under
# wine's 32-bit half. (Its C core once broke a stall clock's invariant
# there: x87 maths kept a sum wider than it is stored.)
# A kernel that runs no 32-bit programs (scripts/x86_runs.sh) cannot run
# wine's 32-bit half: that is said, not counted. (make test then runs the
# core's C tests as 32-bit x86 under qemu instead: scripts/test.sh.)
if [ -f "$top/build/windows-x86/luajit.exe" ] && ! sh "$top/scripts/x86_runs.sh"; then
  echo "== Windows (32-bit): not run here: this kernel runs no 32-bit programs, so neither does wine's 32-bit half"
elif [ -f "$top/build/windows-x86/luajit.exe" ]; then
  cd "$top/build/windows-x86" || exit 1
  rm -rf spec csrc
  cp -r "$top/build/windows/spec" "$top/build/windows/csrc" "$top/build/windows/spec_runner.lua" .
  # shellcheck disable=SC2086
  run "Windows (32-bit): LuaJIT, FFI backend" env STAGEHAND_BACKEND=ffi "$wine32" luajit.exe spec_runner.lua \
    '--lua-dir=Z:\usr\share\lua\5.1' $files
  # shellcheck disable=SC2086
  run "Windows (32-bit): LuaJIT, C module" env STAGEHAND_BACKEND=c "$wine32" luajit.exe spec_runner.lua \
    '--lua-dir=Z:\usr\share\lua\5.1' $files
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
