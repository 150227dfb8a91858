-- What the platform checks run on a core of the kit where make test
-- cannot run the specs (another glibc, another processor): a pool of two
-- worker threads, a job that sleeps and then receives from a port. Prints
-- "BACKEND ARCH 2870 done 42".
local stagehand = require "stagehand"
local orch = stagehand.new { driver = "manual" }
local pool = stagehand.pool(orch, { module = "squares", size = 2,
  source = "return { sq = function(x) return x * x end }" })
local hs, sum = {}, 0
for i = 1, 20 do hs[i] = pool:run("sq", i) end
for i = 1, 20 do
  local st, v = orch:wait(hs[i], 10000)
  assert(st == "done", tostring(v))
  sum = sum + v
end
local port = stagehand.port()
local got = orch:run("a job", function(job) job:sleep(5) return port:receive() end)
port:post(42)
local st, v = orch:wait(got, 10000)
orch:wait(pool:destroy(), 10000)
print(stagehand.backend .. " " .. jit.arch .. " " .. sum .. " " .. st .. " " .. tostring(v))
