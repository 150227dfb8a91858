#!/bin/sh
# make test-old-glibc: the Linux core make love-kit ships, run on an older
# system than this one. Debian 11 (glibc 2.31, as Ubuntu 20.04 and the
# Steam runtime's newest container have) is debootstrapped into
# build/oldroot once (about 200 MB; OLD_SUITE and OLD_MIRROR change it),
# with its own LuaJIT. There, from stagehand's Lua files: the kit's core
# must run a job and a pool of two worker threads on both backends, and
# the core `make build` makes here (glibc 2.36's symbol versions) must
# fail to load, saying which version it lacks; and Debian 11's LÖVE (11.3)
# must run examples/love with the kit's folder dropped in, under its own
# Xvfb, loading every texture on LÖVE worker threads, and pass the LÖVE
# specs (spec/love) with it. Needs root (chroot).
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
suite=${OLD_SUITE:-bullseye}
mirror=${OLD_MIRROR:-http://deb.debian.org/debian}
root=build/oldroot/$suite
fail() { echo "old glibc check: $1"; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root, for debootstrap and chroot"
[ -f build/kit/linux-x64/_core.so ] || fail "build/kit/linux-x64/_core.so is missing: run make build/kit/linux-x64/_core.so"
if [ ! -x "$root/usr/bin/luajit" ] || [ ! -x "$root/usr/bin/love" ]; then
  command -v debootstrap >/dev/null || EXTRA_PKGS=debootstrap sh scripts/deps.sh
  rm -rf "$root"
  mkdir -p build/oldroot
  debootstrap --variant=minbase "$suite" "$root" "$mirror" >build/oldroot/debootstrap.log 2>&1 ||
    { tail -5 build/oldroot/debootstrap.log; fail "debootstrap $suite failed"; }
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  chroot "$root" sh -c 'apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q luajit love xvfb xauth' \
    >build/oldroot/apt.log 2>&1 || { tail -5 build/oldroot/apt.log; fail "installing LuaJIT and LÖVE in $suite failed"; }
fi
w=$root/tmp/stagehand
rm -rf "$w"
mkdir -p "$w/kit/stagehand" "$w/here/stagehand"
cp -R lua "$w/"
cp build/kit/linux-x64/_core.so "$w/kit/stagehand/_core.so"
cp build/luajit/stagehand/_core.so "$w/here/stagehand/_core.so"
cp scripts/kit_smoke.lua "$w/old.lua"
glibc=$(chroot "$root" ldd --version | head -1 | sed 's/.* //')
run() { # $1: which core, $2: backend
  chroot "$root" sh -c "cd /tmp/stagehand && STAGEHAND_BACKEND=$2 LUA_PATH='lua/?.lua;lua/?/init.lua' \
    LUA_CPATH='$1/?.so' luajit old.lua 2>&1"
}
for be in ffi c; do
  out=$(run kit "$be") || true
  [ "$out" = "$be x64 2870 done 42" ] || fail "the kit's core on $suite (glibc $glibc), $be backend, said: $out"
done
out=$(run here ffi) && fail "the core built here loaded on glibc $glibc: the check proves nothing"
echo "$out" | grep -q "version .GLIBC_2\.3[4-9]. not found" || fail "the core built here failed otherwise: $out"
echo "$out" | grep -q "built against a newer C library" || fail "no word of what to do: $out"
[ -f build/love-kit/stagehand/init.lua ] || KIT_WINDOWS=0 sh scripts/love_kit.sh >/dev/null
rm -rf "$root/tmp/game"
mkdir -p "$root/tmp/game" "$root/proc"
cp -R examples/love/. "$root/tmp/game/"
cp -R build/love-kit/stagehand "$root/tmp/game/stagehand"
mount -t proc proc "$root/proc"
trap 'umount "$root/proc" 2>/dev/null || true' EXIT
love=$(chroot "$root" love --version 2>&1 | head -1)
out=$(chroot "$root" sh -c 'cd /tmp && timeout 120 xvfb-run -a love /tmp/game --screenshot /tmp/game/shot.png 2>&1') || true
# (and the LÖVE specs, spec/love, with the kit's folder in them)
rm -rf "$root/tmp/lovespec"
mkdir -p "$root/tmp/lovespec"
cp -R spec/love/. "$root/tmp/lovespec/"
cp -R build/love-kit/stagehand "$root/tmp/lovespec/stagehand"
specs=$(chroot "$root" sh -c 'cd /tmp && timeout 300 xvfb-run -a love /tmp/lovespec 2>&1') || true
umount "$root/proc"
echo "$out" | grep -q "on the ffi backend" || fail "$love on $suite: examples/love with the kit did not run on the FFI backend: $out"
echo "$out" | grep -Eq "^loaded 12 of 14 textures \(2 stand-ins\); decoded on [0-9]+ LÖVE worker" ||
  fail "$love on $suite: examples/love with the kit did not load every texture: $out"
summary=$(echo "$specs" | grep -E "^love: [0-9]+ passed, [0-9]+ failed")
echo "$summary" | grep -q ", 0 failed" || fail "$love on $suite: the LÖVE specs with the kit: ${summary:-no summary}: $specs"
echo "$love on $suite ran examples/love with the kit's folder (12 of 14 textures, 2 stand-ins) and the LÖVE specs (${summary#love: })"
echo "the kit's core ran a pool of 2 threads and a job receiving from a port on $suite (glibc $glibc), on both backends; the core built here did not load there and said why"
