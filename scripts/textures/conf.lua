-- Writes PNG textures for the LÖVE example, specs and bench (love.image
-- encodes them): no window, no sound.
function love.conf(t)
  t.window = nil
  t.modules.window, t.modules.graphics, t.modules.audio, t.modules.sound = false, false, false, false
  t.identity = "stagehand-textures"
end
