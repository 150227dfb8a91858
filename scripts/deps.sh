#!/bin/sh
# Installs the Debian packages stagehand needs, only when one is missing:
# `apt-get update` once, then one `apt-get install -y`. A no-op otherwise.
set -e
pkgs="luajit libluajit-5.1-dev lua5.4 liblua5.4-dev lua5.3 liblua5.3-dev lua5.2 liblua5.2-dev \
lua5.1 liblua5.1-0-dev lua-luv lua-luv-dev libuv1-dev lua-busted lua-check lua-cjson luarocks zip gcc make love xvfb xauth $EXTRA_PKGS"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "stagehand: installing$missing"
sudo=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "stagehand: need root (or sudo) to install:$missing" >&2; exit 1; }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
# (a package of another architecture, wine32:i386, needs that architecture
# added before the update)
for p in $missing; do
  arch=${p#*:}
  [ "$arch" = "$p" ] && continue
  [ "$arch" = "$(dpkg --print-architecture)" ] && continue
  dpkg --print-foreign-architectures | grep -qx "$arch" || $sudo dpkg --add-architecture "$arch"
done
# (An update that fails for one list, a mirror caught mid-sync or an
# architecture the packages do not need, still leaves lists that may hold
# every package wanted: the install is tried anyway, and once more after a
# second update a little later. If that fails too, the suites whose lists
# could not be fetched are set below the others for this install only (a
# preferences file of its own, not /etc/apt's): a suite that updates the
# host's packages but whose i386 list is missing offers newer amd64
# versions than any i386 one apt can see, and a package both architectures
# share (libssl3, zlib1g) must be the same version in both.)
log=$(mktemp)
pin=$(mktemp)
: >"$log.suites"
update() {
  $sudo apt-get update -qq 2>"$log" && { cat "$log" >&2; return 0; }
  cat "$log" >&2
  sed -n 's#^[EW]: Failed to fetch [^ ]*/dists/\([^/ ]*\)/.*#\1#p' "$log" >>"$log.suites"
  return 1
}
install() { # $@: apt-get's own options
  # shellcheck disable=SC2086 # (a list of packages)
  $sudo apt-get install -y -qq --no-install-recommends "$@" $missing >/dev/null
}
trap 'rm -f "$log" "$log.suites" "$pin"' EXIT
if ! update; then
  echo "stagehand: apt-get update failed (above); installing from the package lists it has" >&2
fi
install && exit 0
echo "stagehand: could not install$missing; updating again in 20 s" >&2
sleep 20
update || true
install && exit 0
suites=$(sort -u "$log.suites")
if [ -n "$suites" ]; then
  for s in $suites; do
    printf 'Package: *\nPin: release n=%s\nPin-Priority: 100\n\n' "$s"
  done >"$pin"
  echo "stagehand: installing again with these suites, whose lists could not be fetched, set below the others: $(echo "$suites" | tr '\n' ' ')" >&2
  install -o Dir::Etc::Preferences="$pin" && exit 0
fi
echo "stagehand: could not install$missing (apt-get's messages above)" >&2
exit 1
