#!/bin/sh
# make test-browser: stagehand in LÖVE in a web browser. love.js (LÖVE 11.4
# and Lua 5.1 compiled to WebAssembly, the build itch.io and other sites
# serve) packs two games with stagehand's Lua files as web pages, and a
# headless Chromium opens each; what they print reaches the browser's
# console. spec/love_pure runs its own checks (the pure-Lua core chosen,
# the reason worker threads are missing, a loading scene on real frames);
# examples/love loads its real PNGs, decoded on the main thread since no
# worker thread runs there, and is held to what scripts/love_check.sh
# holds it to under Xvfb, but for its corrupt PNG (see below).
#
# love.js comes from the npm registry (love.js@LOVEJS_VERSION, into
# build/lovejs), not from Debian: that is why `make test` does not run
# this. Chromium, Node.js and npm are installed from Debian when missing.
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
version=${LOVEJS_VERSION:-11.4.1}
need=""
command -v chromium >/dev/null 2>&1 || need="$need chromium"
command -v npm >/dev/null 2>&1 || need="$need nodejs npm"
[ -z "$need" ] || EXTRA_PKGS="$need" sh scripts/deps.sh || exit 1
lovejs=build/lovejs/node_modules/love.js/index.js
if ! grep -q "\"version\": \"$version\"" build/lovejs/node_modules/love.js/package.json 2>/dev/null; then
  echo "== love.js $version from the npm registry, into build/lovejs"
  mkdir -p build/lovejs
  npm install --prefix build/lovejs --no-audit --no-fund --silent "love.js@$version" || exit 1
fi

work=$(mktemp -d)
server=
browser=
# (Chromium's helper processes may still write its profile for a moment
# after it is told to end)
# shellcheck disable=SC2317,SC2086 # (run by the trap; either may be empty)
cleanup() {
  kill $server $browser 2>/dev/null
  wait 2>/dev/null
  rm -rf "$work" 2>/dev/null || { sleep 1; rm -rf "$work"; }
}
trap cleanup EXIT

# The server each page is served by, on a free port it prints.
cat >"$work/serve.js" <<'JS'
const http = require("http"), fs = require("fs"), path = require("path");
const root = process.argv[2];
const types = { ".html": "text/html", ".js": "text/javascript", ".wasm": "application/wasm",
  ".data": "application/octet-stream", ".css": "text/css", ".png": "image/png" };
const server = http.createServer((req, res) => {
  const file = path.join(root, decodeURIComponent(req.url.split("?")[0]).replace(/\/$/, "/index.html"));
  if (!file.startsWith(root)) { res.writeHead(403); return res.end(); }
  fs.readFile(file, (err, body) => {
    if (err) { res.writeHead(404); return res.end(); }
    res.writeHead(200, { "Content-Type": types[path.extname(file)] || "application/octet-stream" });
    res.end(body);
  });
});
server.listen(0, "127.0.0.1", () => console.log(server.address().port));
JS
sandbox=""
[ "$(id -u)" = 0 ] && sandbox="--no-sandbox" # (Chromium refuses root otherwise)
echo "== LÖVE in a web browser: love.js $version, headless Chromium $(chromium --version 2>/dev/null | awk '{print $2}')"

# Packs the game folder $2 with stagehand's Lua files, and without the
# file $5 if given; serves it, and opens it with LÖVE's arguments $4 (JSON
# list items, each after a comma) until the console says $3 (an extended
# regular expression). Leaves the console's lines in $work/$1.console.
# (A game whose conf.lua turns LÖVE's audio off, as spec/love_pure's does
# for Xvfb, gets one written here that leaves it on: love.js 11.4.1 cannot
# start without it, and stops before the first frame with "RuntimeError:
# null function". examples/love runs with its own.)
page() { # $1: name, $2: game folder, $3: the line that ends it, $4: arguments, $5: a file left out
  name=$1
  game=$work/$name/game
  mkdir -p "$game"
  cp -r "$2"/. "$game/"
  [ -z "$5" ] || rm "$game/$5"
  cp -r lua/stagehand "$game/stagehand"
  if grep -q "modules.audio = false" "$game/conf.lua"; then
    cat >"$game/conf.lua" <<LUA
function love.conf(t)
  t.identity = "stagehand-browser-$name"
  t.window.width, t.window.height = 640, 400
end
LUA
  fi
  # (-c: love.js's compatibility build, which needs no SharedArrayBuffer,
  # as a site serves it without cross-origin isolation)
  node "$lovejs" -c -t "$name" "$game" "$work/$name/page" >"$work/$name/pack.log" 2>&1 || {
    echo "!! love.js could not pack $2:"
    cat "$work/$name/pack.log"
    return 1
  }
  sed -i "s|arguments: \[\"./\"\]|arguments: [\"./\"$4]|" "$work/$name/page/index.html"
  node "$work/serve.js" "$work/$name/page" >"$work/$name/port" 2>"$work/$name/serve.log" &
  server=$!
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    [ -s "$work/$name/port" ] && break
    sleep 0.5
  done
  port=$(head -1 "$work/$name/port")
  [ -n "$port" ] || { echo "!! the page server did not start:"; cat "$work/$name/serve.log"; return 1; }
  # (love.js's print goes to the console, which Chromium writes to its
  # log; SwiftShader draws WebGL without a GPU)
  chromium --headless=new $sandbox --user-data-dir="$work/$name/profile" --use-angle=swiftshader \
    --enable-unsafe-swiftshader --enable-logging=stderr --v=0 --autoplay-policy=no-user-gesture-required \
    "http://127.0.0.1:$port/" >/dev/null 2>"$work/$name/chromium.log" &
  browser=$!
  waited=0
  while [ $waited -lt 120 ]; do
    grep "CONSOLE" "$work/$name/chromium.log" | sed -e 's/^.*CONSOLE:[0-9]*\] "//' -e 's/", source: .*$//' |
      grep -v "^loading game.data" >"$work/$name.console"
    grep -Eq "$3" "$work/$name.console" && break
    kill -0 $browser 2>/dev/null || break
    sleep 1
    waited=$((waited + 1))
  done
  kill $server $browser 2>/dev/null
  wait 2>/dev/null
  server=
  browser=
  echo "-- $2 ($waited s)"
  cat "$work/$name.console"
  grep -Eq "$3" "$work/$name.console" && return 0
  echo "!! $2 did not finish in the browser:"
  grep -v -e dbus -e Fontconfig "$work/$name/chromium.log" | tail -20
  return 1
}

fail() {
  echo "!! $1"
  exit 1
}
page pure spec/love_pure "^love-pure: " "" || exit 1
grep -Eq "^love-pure: [1-9][0-9]* passed, 0 failed" "$work/pure.console" || fail "spec/love_pure failed in the browser"

# (Without its corrupt PNG: in love.js 11.4.1 a LÖVE call that fails, as
# decoding a corrupt image does, stops the game, pcall or not, since its
# WebAssembly build cannot catch the C++ exception behind the error.)
page example examples/love "^the bar moved back" \
  ', "--screenshot", "/scene.png", "--loading-screenshot", "/loading.png"' textures/tile-corrupt.png || exit 1
said=$(cat "$work/example.console")
echo "$said" | grep -q "^stagehand [0-9.]* on the lua backend" || fail "the example did not run on the pure-Lua core"
# shellcheck source=scripts/example_said.sh
. scripts/example_said.sh
example_said "$said" "12 of 13 textures \(1 stand-ins\); decoded on the main thread"
echo "LÖVE ran both games in the browser"
