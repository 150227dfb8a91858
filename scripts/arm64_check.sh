#!/bin/sh
# The kit's 64-bit ARM Linux core, run under qemu's user-mode emulation
# with Debian's own LuaJIT for arm64: Debian's arm64 packages are unpacked
# (debootstrap --foreign: nothing of them runs) into build/oldroot/arm64
# once, about 100 MB (ARM64_SUITE and ARM64_MIRROR change it).
#   sh scripts/arm64_check.sh        (make test) a job, a pool of two
#                                    worker threads and a port, on both
#                                    backends
#   sh scripts/arm64_check.sh --specs  (make test-arm64) every spec that
#                                    runs off Linux's tools, through
#                                    scripts/spec_runner.lua, on both
#                                    backends (about 7 minutes each)
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
suite=${ARM64_SUITE:-bookworm}
mirror=${ARM64_MIRROR:-http://deb.debian.org/debian}
root=$top/build/oldroot/arm64-$suite
core=build/kit/linux-arm64/_core.so
fail() { echo "arm64 check: $1"; exit 1; }
[ -f "$core" ] || fail "$core is missing: run make $core"
command -v qemu-aarch64-static >/dev/null || fail "qemu-aarch64-static is missing (Debian's qemu-user-static)"
if [ ! -x "$root/usr/bin/luajit" ] || [ ! -f "$root/usr/lib/aarch64-linux-gnu/lua/5.1/luv.so" ]; then
  command -v debootstrap >/dev/null || fail "debootstrap is missing"
  rm -rf "$root"
  mkdir -p "$(dirname "$root")"
  debootstrap --arch=arm64 --foreign --variant=minbase --include=luajit,lua-luv "$suite" "$root" "$mirror" \
    >"$root.log" 2>&1 || { tail -5 "$root.log"; fail "debootstrap of $suite for arm64 failed"; }
  for deb in "$root"/var/cache/apt/archives/luajit_*.deb "$root"/var/cache/apt/archives/libluajit-5.1-*.deb \
      "$root"/var/cache/apt/archives/lua-luv_*.deb "$root"/var/cache/apt/archives/libuv1_*.deb; do
    dpkg-deb -x "$deb" "$root"
  done
fi
w=$root/tmp/stagehand
rm -rf "$w"
mkdir -p "$w/stagehand"
cp -R lua "$w/"
cp "$core" "$w/stagehand/_core.so"
# (luajit on PATH is the arm64 one too, for the specs that start one; its
# paths: stagehand's files and core here, busted's pure-Lua parts from
# this system, LuaJIT's jit.* and luv from the arm64 packages)
mkdir -p "$w/bin"
printf '#!/bin/sh\nexec qemu-aarch64-static -L "%s" "%s/usr/bin/luajit" "$@"\n' "$root" "$root" >"$w/bin/luajit"
chmod +x "$w/bin/luajit"
run() { # $1: backend, then luajit's arguments
  be=$1
  shift
  (cd "$w" && PATH="$w/bin:$PATH" STAGEHAND_BACKEND=$be \
    LUA_PATH="./?.lua;lua/?.lua;lua/?/init.lua;/usr/share/lua/5.1/?.lua;/usr/share/lua/5.1/?/init.lua;$root/usr/share/luajit-2.1.0-beta3/?.lua" \
    LUA_CPATH="./?.so;/usr/lib/aarch64-linux-gnu/lua/5.1/?.so" luajit "$@" 2>&1)
}
if [ "$1" = --specs ]; then
  mkdir -p "$w/spec" "$w/csrc/core"
  cp spec/*.lua "$w/spec/"
  cp -r spec/fixtures "$w/spec/"
  cp csrc/core/*.h "$w/csrc/core/"
  cp scripts/spec_runner.lua "$w/"
  files=""
  for f in spec/*_spec.lua; do
    case "$f" in # (as on Windows: the tree's and Linux tools' specs stay with the Linux runs)
      spec/docs_spec.lua | spec/module_spec.lua | spec/shape_spec.lua | spec/luv_spec.lua | spec/trace_spec.lua) ;;
      *) files="$files $f" ;;
    esac
  done
  status=0
  for be in ffi c; do
    echo "== 64-bit ARM Linux under qemu: LuaJIT, $be backend"
    # shellcheck disable=SC2086
    out=$(run "$be" spec_runner.lua $files) || status=1
    echo "$out" | grep -v '^\.*$' | tail -40
  done
  exit $status
fi
cp scripts/kit_smoke.lua "$w/smoke.lua"
for be in ffi c; do
  out=$(run "$be" smoke.lua) || true
  [ "$out" = "$be arm64 2870 done 42" ] || fail "the kit's arm64 core, $be backend, said: $out"
done
echo "the kit's 64-bit ARM core ran a job, a pool of 2 threads and a port under qemu ($suite's LuaJIT), on both backends"
