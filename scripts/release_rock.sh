#!/bin/sh
# make rock: the release rockspec and its source rock.
#
# rockspec/stagehand-VERSION-1.rockspec is made from the checkout's
# rockspec (rockspec/stagehand-scm-1.rockspec, kept for checkouts) with
# the version stagehand.VERSION says (lua/stagehand/init.lua: the one place
# it is written) and a source of the form a published rock has: a git+https
# URL and the release's tag. Until the project has a public home the URL is
# ROCK_URL's (the Makefile's variable). With --check it only says whether
# the committed one is in step.
#
# build/rock/stagehand-VERSION-1.src.rock is that rockspec and the
# checkout's files (git archive of HEAD) under the directory the URL names,
# as `luarocks pack` lays one out, so `luarocks install` builds it with no
# network.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
url=${ROCK_URL:?set ROCK_URL}
version=$(sed -n 's/^M.VERSION = "\([^"]*\)".*/\1/p' lua/stagehand/init.lua)
[ -n "$version" ] || { echo "stagehand: no M.VERSION in lua/stagehand/init.lua" >&2; exit 1; }
name="stagehand-$version-1.rockspec"
dir=$(basename "$url" .git)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed -e "s|^version = \"scm-1\"|version = \"$version-1\"|" \
    -e "/^source = {/,/^}/c\\
source = {\\
  url = \"$url\",\\
  tag = \"v$version\",\\
  dir = \"$dir\",\\
}" rockspec/stagehand-scm-1.rockspec >"$tmp/$name"
if [ "$1" = --check ]; then
  cmp -s "$tmp/$name" "rockspec/$name" || { echo "rockspec/$name is not what make rock makes: run make rock"; exit 1; }
  exit 0
fi
cp "$tmp/$name" "rockspec/$name"
luarocks lint "rockspec/$name"
mkdir -p build/rock "$tmp/pack/$dir"
git archive HEAD | tar -x -C "$tmp/pack/$dir"
cp "rockspec/$name" "$tmp/pack/$name" # (the one just made, should HEAD not have it yet)
cp "rockspec/$name" "$tmp/pack/$dir/rockspec/$name"
rm -f "build/rock/stagehand-$version-1.src.rock"
(cd "$tmp/pack" && zip -qr "$top/build/rock/stagehand-$version-1.src.rock" "$name" "$dir")
echo "build/rock/stagehand-$version-1.src.rock (rockspec/$name)"
