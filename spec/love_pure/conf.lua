-- The pure-Lua core inside LÖVE, headless under Xvfb (scripts/love_specs.sh).
function love.conf(t)
  t.identity = "stagehand-love-pure"
  t.window.width, t.window.height = 64, 64
  t.modules.audio = false
end
