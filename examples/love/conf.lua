function love.conf(t)
  t.identity = "stagehand-love-example"
  t.window.title = "stagehand: a loading screen"
  t.window.width = 640
  t.window.height = 400
  -- (audio stays on though nothing here plays: a web build made with
  -- love.js 11.4.1 does not start without it)
end
