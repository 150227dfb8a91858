-- luv's loop inside LÖVE, headless under Xvfb (scripts/love_specs.sh).
function love.conf(t)
  t.identity = "stagehand-love-luv"
  t.window.width, t.window.height = 64, 64
  t.modules.audio = false
end
