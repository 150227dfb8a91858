-- The LÖVE specs run headless under Xvfb (scripts/love_specs.sh): a small
-- window, no sound device.
function love.conf(t)
  t.identity = "stagehand-love-specs"
  t.window.width, t.window.height = 64, 64
  t.modules.audio = false
end
