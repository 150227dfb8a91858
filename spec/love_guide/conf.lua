-- The guide's LÖVE programs run headless under Xvfb
-- (scripts/guide_love_check.sh): a small window, no sound device.
function love.conf(t)
  t.identity = "stagehand-guide-check"
  t.window.width, t.window.height = 64, 64
  t.modules.audio = false
end
