#!/bin/sh
# make test-browser: stagehand in LÖVE in a web browser. love.js (LÖVE 11.4
# and Lua 5.1 compiled to WebAssembly, the build itch.io and other sites
# serve) packs spec/love_pure with stagehand's Lua files as a web page; a
# headless Chromium opens it, and the game's own checks (the pure-Lua core
# chosen, the reason worker threads are missing, a loading scene on real
# frames) print to the browser's console. Passes on "love-pure: N passed,
# 0 failed".
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
# The game: spec/love_pure as it stands, stagehand's Lua files where
# LÖVE's require finds them, and no native core. (Its own conf.lua turns
# LÖVE's audio off, which love.js 11.4.1 cannot start without: the page
# stops before the first frame with "RuntimeError: null function". The
# one written here leaves it on.)
mkdir -p "$work/game"
cp spec/love_pure/main.lua "$work/game/"
cp -r lua/stagehand "$work/game/stagehand"
cat >"$work/game/conf.lua" <<'EOF'
function love.conf(t)
  t.identity = "stagehand-love-pure"
  t.window.width, t.window.height = 64, 64
end
EOF
# (-c: love.js's compatibility build, which needs no SharedArrayBuffer,
# as a site serves it without cross-origin isolation)
node "$lovejs" -c -t love-pure "$work/game" "$work/page" >"$work/pack.log" 2>&1 || {
  echo "!! love.js could not pack the game:"
  cat "$work/pack.log"
  exit 1
}

# A static server for the page, on a free port it prints.
cat >"$work/serve.js" <<'EOF'
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
EOF
node "$work/serve.js" "$work/page" >"$work/port" 2>"$work/serve.log" &
server=$!
for _ in 1 2 3 4 5 6 7 8 9 10; do
  [ -s "$work/port" ] && break
  sleep 0.5
done
port=$(head -1 "$work/port")
[ -n "$port" ] || { echo "!! the page server did not start:"; cat "$work/serve.log"; exit 1; }

# Chromium prints the page's console to its log; love.js's print goes
# there. (--no-sandbox: Chromium refuses root otherwise; SwiftShader
# draws WebGL without a GPU.)
sandbox=""
[ "$(id -u)" = 0 ] && sandbox="--no-sandbox"
chromium --headless=new $sandbox --user-data-dir="$work/profile" --use-angle=swiftshader \
  --enable-unsafe-swiftshader --enable-logging=stderr --v=0 --autoplay-policy=no-user-gesture-required \
  "http://127.0.0.1:$port/" >/dev/null 2>"$work/chromium.log" &
browser=$!
console() {
  grep "CONSOLE" "$work/chromium.log" | sed -e 's/^.*CONSOLE:[0-9]*\] "//' -e 's/", source: .*$//'
}
waited=0
while [ $waited -lt 120 ]; do
  console | grep -q "^love-pure: " && break
  kill -0 $browser 2>/dev/null || break
  sleep 1
  waited=$((waited + 1))
done
echo "== spec/love_pure in LÖVE in a web browser (love.js $version, headless Chromium $(chromium --version 2>/dev/null | awk '{print $2}'))"
console | grep -v "^loading game.data"
if console | grep -Eq "^love-pure: [1-9][0-9]* passed, 0 failed"; then
  exit 0
fi
echo "!! no passing summary from the game in the browser (waited ${waited} s)"
grep -v -e dbus -e Fontconfig "$work/chromium.log" | tail -20
exit 1
