-- The bench worker's process plumbing (emmy.worker, scripts/worker/main.lua, sys.spawn) without a GPU: requests
-- and answers as JSON lines, a child that dies or hangs becomes a "crashed" / "timeout" answer and is replaced,
-- unknown requests are answered, and on a machine without a GPU a bench request says so.
local worker = require "emmy.worker"
local sys = require "emmy.sys"

local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end

test("sys.spawn: lines both ways, a deadline, the way a child ended", function()
  local p = assert(sys.spawn { "sh", "-c", "while read l; do echo got:$l; done" })
  assert(p:send("hello"))
  eq(p:recv(5000), "got:hello", "answer")
  local none, why = p:recv(100)
  check(none == nil and why == "timeout", tostring(why))
  p:kill()
  p:kill()
  local q = assert(sys.spawn { "sh", "-c", "echo one; exit 7" })
  eq(q:recv(5000), "one", "a line before exiting")
  local _, how = q:recv(5000)
  eq(how, "exited: status 7", "the exit status")
  local ok, err = q:send("x")
  check(not ok and err:find("exited", 1, true), tostring(err))
end)

test("worker: faults and hangs are answers, the worker is replaced, the next request is served", function()
  local w = assert(worker.start { test = true })
  local a = w:call({ op = "ping" }, 10000)
  eq(a.status, "ok", "ping")
  local k = w:call({ op = "kill" }, 10000)
  eq(k.status, "crashed", "a child killed by a signal")
  check(k.error:find("signal 9", 1, true), k.error)
  local b = w:call({ op = "ping" }, 10000)
  eq(b.status, "ok", "a fresh child answers")
  check(b.pid ~= a.pid, "it is another process")
  local h = w:call({ op = "hang" }, 300)
  eq(h.status, "timeout", "a hang past the deadline")
  local e = w:call({ op = "exit" }, 10000)
  eq(e.status, "crashed", "a child that exits")
  eq(w:call({ op = "nope" }, 10000).status, "bad_request", "unknown op")
  eq(w.restarts, 3, "three replacements")
  w:close()
end)

test("worker: a bench request on a machine without a GPU says so", function()
  if sys.cuda() then skip("this machine has a GPU") end
  local w = assert(worker.start())
  local r = w:call({ op = "bench", repro = ROOT .. "/tests/fixtures/block.torch.json", bind = { seq_len = 5 } }, 30000)
  eq(r.status, "no_gpu", "status")
  check(r.error and #r.error > 0, "the reason")
  w:close()
end)

return T
