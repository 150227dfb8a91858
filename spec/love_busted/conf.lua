-- The thread specs under busted inside LÖVE (main.lua): headless under
-- Xvfb, no sound.
function love.conf(t)
  t.identity = "stagehand-love-busted"
  t.window.width, t.window.height = 64, 64
  t.modules.audio = false
end
