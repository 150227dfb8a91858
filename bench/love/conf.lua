-- The LÖVE peer bench (scripts/bench_love.sh): no vsync, so a frame's time
-- is its own work, not the display's; no sound device.
function love.conf(t)
  t.identity = "stagehand-bench-love"
  t.window.width, t.window.height = 640, 400
  t.window.vsync = 0
  t.modules.audio = false
end
