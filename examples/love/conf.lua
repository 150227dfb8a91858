function love.conf(t)
  t.identity = "stagehand-love-example"
  t.window.title = "stagehand: a loading screen"
  t.window.width = 640
  t.window.height = 400
  t.modules.audio = false -- (no sound here; a headless run has no device either)
  t.modules.sound = false
end
