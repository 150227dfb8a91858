#!/bin/sh
# Installs the rockspec with `luarocks make` (no network: --deps-mode=none)
# into a temporary tree for each runtime, then loads the installed copy from
# outside the source tree and runs a job through it.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
# The release's source rock too (make rock), installed as a user would,
# with no network: each runtime gets both, in trees of their own.
ROCK_URL=${ROCK_URL:-git+https://stagehand.invalid/stagehand.git} sh scripts/release_rock.sh >"$tmp/pack.log" 2>&1 ||
  { cat "$tmp/pack.log"; echo "make rock failed"; exit 1; }
src_rock=$(ls build/rock/stagehand-*-1.src.rock | tail -1)
# (luarocks make builds in the directory it runs in, objects and the module
# both: it runs in a copy of the tree, so nothing lands in the checkout, where
# a stray ./stagehand/_core.so would be found on the default package.cpath)
mkdir "$tmp/src"
cp -r csrc lua rockspec types examples "$tmp/src/"
for run in "$@"; do
 for how in make install; do
  rt=$run
  case "$rt" in
    luajit) ver=5.1; extra="LUA_INCDIR=/usr/include/luajit-2.1" ;;
    lua5.*) ver=${rt#lua}; extra="" ;;
  esac
  tree="$tmp/$rt-$how"
  if [ "$how" = make ]; then
    # (luarocks make builds in the source tree; keep its objects out of build/)
    set -- sh -c 'cd "$1" && shift && exec "$@"' - "$tmp/src" \
      luarocks make --tree="$tree" --lua-version=$ver --deps-mode=none $extra rockspec/stagehand-scm-1.rockspec
  else
    set -- luarocks install --tree="$tree" --lua-version=$ver --deps-mode=none "$src_rock" $extra
  fi
  if ! "$@" >"$tmp/$rt.log" 2>&1; then
    cat "$tmp/$rt.log"
    echo "rock on $rt: luarocks $how failed"
    failed=$((failed + 1))
    continue
  fi
  if (cd "$tmp" && LUA_PATH="$tree/share/lua/$ver/?.lua;$tree/share/lua/$ver/?/init.lua;;" \
      LUA_CPATH="$tree/lib/lua/$ver/?.so;;" "$rt" -e '
        local stagehand = require "stagehand"
        assert(debug.getinfo(stagehand.new, "S").source:find("'"$tree"'", 1, true), "not the installed copy")
        local orch = stagehand.new { driver = "manual" }
        local h = orch:run("smoke", function(job) job:sleep(0) return "ok" end)
        local st, v = orch:wait(h, 1000)
        assert(st == "done" and v == "ok", tostring(st) .. " " .. tostring(v))
        local pool = stagehand.pool(orch, { module = "inline", size = 1,
          source = "return { twice = function(x) return 2 * x end }" })
        st, v = orch:wait(pool:run("twice", 21), 10000)
        assert(st == "done" and v == 42, "a worker pool: " .. tostring(st) .. " " .. tostring(v))
        orch:wait(pool:destroy(), 10000)
        print("rock on '"$rt"' (luarocks '"$how"'): installed, and ran a job through the " .. stagehand.backend
          .. " backend and one on a worker")'); then
    :
  else
    failed=$((failed + 1))
  fi
 done
done
[ "$failed" -eq 0 ]
