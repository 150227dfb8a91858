#!/bin/sh
# make test-systems: the kit (make love-kit) on other Debian systems than
# this one, each debootstrapped into build/oldroot/SUITE once (about 40 s
# and 300 MB each) with its own LuaJIT and LÖVE:
#   bullseye  Debian 11: glibc 2.31 (as Ubuntu 20.04 and the Steam
#             runtime's newest container have), LÖVE 11.3
#   trixie    Debian 13: glibc 2.41, LÖVE 11.5 (the LÖVE most games use)
# On each, from stagehand's Lua files: the kit's Linux core runs a pool of
# two worker threads and a job receiving from a port, on both backends;
# LÖVE runs examples/love with the kit's folder dropped in, under its own
# Xvfb, loading every texture on LÖVE worker threads; and the LÖVE specs
# (spec/love) pass with it, and again on the pure-Lua core
# (STAGEHAND_BACKEND=lua: pools, ports and round barriers on that LÖVE's
# own channels). Where glibc is older than 2.34, the core `make
# build` makes here must fail to load, saying which version it lacks.
# SYSTEMS="bullseye" (say) picks; OLD_MIRROR changes the mirror. Needs root
# (debootstrap, chroot, and mounting /proc in the root for Xvfb).
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
mirror=${OLD_MIRROR:-http://deb.debian.org/debian}
fail() { echo "systems check: $1"; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root, for debootstrap and chroot"
[ -f build/kit/linux-x64/_core.so ] || fail "build/kit/linux-x64/_core.so is missing: run make build/kit/linux-x64/_core.so"
[ -f build/love-kit/stagehand/init.lua ] || KIT_WINDOWS=0 sh scripts/love_kit.sh >/dev/null
mounted=""
trap 'for m in $mounted; do umount "$m" 2>/dev/null || true; done' EXIT

check_suite() { # $1: the suite
  suite=$1
  root=build/oldroot/$suite
  if [ ! -x "$root/usr/bin/luajit" ] || [ ! -x "$root/usr/bin/love" ]; then
    command -v debootstrap >/dev/null || EXTRA_PKGS=debootstrap sh scripts/deps.sh
    rm -rf "$root"
    mkdir -p build/oldroot
    debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$root.debootstrap.log" 2>&1 ||
      { tail -5 "$root.debootstrap.log"; fail "debootstrap $suite failed"; }
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    chroot "$root" sh -c '{ apt-get update -q || true; } && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
      --no-install-recommends luajit love xvfb xauth' >"$root.apt.log" 2>&1 ||
      { tail -5 "$root.apt.log"; fail "installing LuaJIT and LÖVE in $suite failed"; }
  fi
  w=$root/tmp/stagehand
  rm -rf "$w"
  mkdir -p "$w/kit/stagehand" "$w/here/stagehand"
  cp -R lua "$w/"
  cp build/kit/linux-x64/_core.so "$w/kit/stagehand/_core.so"
  cp build/luajit/stagehand/_core.so "$w/here/stagehand/_core.so"
  cp scripts/kit_smoke.lua "$w/smoke.lua"
  glibc=$(chroot "$root" ldd --version | head -1 | sed 's/.* //')
  run() { # $1: which core, $2: backend
    chroot "$root" sh -c "cd /tmp/stagehand && STAGEHAND_BACKEND=$2 LUA_PATH='lua/?.lua;lua/?/init.lua' \
      LUA_CPATH='$1/?.so' luajit smoke.lua 2>&1"
  }
  for be in ffi c; do
    out=$(run kit "$be") || true
    [ "$out" = "$be x64 2870 done 42" ] || fail "the kit's core on $suite (glibc $glibc), $be backend, said: $out"
  done
  said="the kit's core ran a pool of 2 threads and a job receiving from a port on both backends"
  if [ "$(printf '%s\n2.34\n' "$glibc" | sort -V | head -1)" != 2.34 ]; then
    out=$(run here ffi) && fail "the core built here loaded on glibc $glibc: the check proves nothing"
    echo "$out" | grep -q "version .GLIBC_2\.3[4-9]. not found" || fail "the core built here failed otherwise: $out"
    echo "$out" | grep -q "built against a newer C library" || fail "no word of what to do: $out"
    said="$said; the core built here did not load there and said why"
  fi
  # (LÖVE: the example, then the LÖVE specs, each with the kit's folder)
  rm -rf "$root/tmp/game" "$root/tmp/lovespec"
  mkdir -p "$root/tmp/game" "$root/tmp/lovespec" "$root/proc"
  cp -R examples/love/. "$root/tmp/game/"
  cp -R build/love-kit/stagehand "$root/tmp/game/stagehand"
  cp -R spec/love/. "$root/tmp/lovespec/"
  cp -R build/love-kit/stagehand "$root/tmp/lovespec/stagehand"
  mount -t proc proc "$root/proc"
  mounted="$mounted $root/proc"
  love=$(chroot "$root" love --version 2>&1 | head -1)
  out=$(chroot "$root" sh -c 'cd /tmp && timeout 120 xvfb-run -a love /tmp/game --screenshot /tmp/game/shot.png 2>&1') ||
    true
  specs=$(chroot "$root" sh -c 'cd /tmp && timeout 300 xvfb-run -a love /tmp/lovespec 2>&1') || true
  pure=$(chroot "$root" sh -c 'cd /tmp && STAGEHAND_BACKEND=lua timeout 300 xvfb-run -a love /tmp/lovespec 2>&1') || true
  umount "$root/proc"
  echo "$out" | grep -q "on the ffi backend" || fail "$love on $suite: examples/love with the kit did not run on the FFI backend: $out"
  echo "$out" | grep -Eq "^loaded 12 of 14 textures \(2 stand-ins\); decoded on [0-9]+ LÖVE worker" ||
    fail "$love on $suite: examples/love with the kit did not load every texture: $out"
  summary=$(echo "$specs" | grep -E "^love: [0-9]+ passed, [0-9]+ failed" || true)
  echo "$summary" | grep -q ", 0 failed" || fail "$love on $suite: the LÖVE specs with the kit: ${summary:-no summary}: $specs"
  pure_summary=$(echo "$pure" | grep -E "^love: [0-9]+ passed, [0-9]+ failed" || true)
  if ! { echo "$pure" | grep -q "lua backend" && echo "$pure_summary" | grep -q ", 0 failed"; }; then
    fail "$love on $suite: the LÖVE specs on the pure-Lua core: ${pure_summary:-no summary}: $pure"
  fi
  echo "$suite (glibc $glibc, $love): $said; examples/love loaded 12 of 14 textures (2 stand-ins); the LÖVE specs:" \
    "${summary#love: }; on the pure-Lua core: ${pure_summary#love: }"
}

for suite in ${SYSTEMS:-bullseye trixie}; do check_suite "$suite"; done
