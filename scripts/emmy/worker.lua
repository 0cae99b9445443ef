-- emmy.worker — the bench worker: a child `emmy` process that owns the CUDA context and answers one JSON request
-- per line (scripts/worker/main.lua). The parent (the tuner) keeps the DB, the rules and the search; a request
-- that faults the GPU, kills the child or outlives its deadline becomes a row with that status, and the next
-- request finds a fresh child (a faulted CUDA context is gone with the process that owned it).
--   local w = worker.start()                 -- nil, msg
--   local resp = w:call({op = "ping"}, 5000)  -- resp.status: "ok", …, or "timeout" / "crashed" (restarted)
--   w:close()
local cjson = require "cjson"
local sys = require "emmy.sys"

local M = {}

local W = {}
W.__index = W

local function exe() return sys.realpath("/proc/self/exe") or (EMMY_HOME .. "/emmy") end

local function spawn(test)
  local argv = { exe(), EMMY_HOME .. "/scripts/worker/main.lua" }
  if test then table.insert(argv, 1, "EMMY_WORKER_TEST=1") table.insert(argv, 1, "env") end
  return sys.spawn(argv)
end

-- opts.test: the child also answers the test-only requests (exit, kill, hang) that tests use to plant faults.
function M.start(opts)
  local test = opts and opts.test or false
  local p, err = spawn(test)
  if not p then return nil, "worker: " .. tostring(err) end
  return setmetatable({ proc = p, restarts = 0, served = 0, test = test }, W)
end

function W:restart()
  if self.proc then self.proc:kill() end
  self.proc = assert(spawn(self.test))
  self.restarts = self.restarts + 1
end

-- Sends req (a table) and waits up to timeout_ms for the answer. A dead or silent child is killed, restarted
-- and reported as {status = "crashed" | "timeout", error = …}.
function W:call(req, timeout_ms)
  local ok, err = self.proc:send(cjson.encode(req))
  local line
  if ok then line, err = self.proc:recv(timeout_ms or 60000) end
  if not line then
    local status = err == "timeout" and "timeout" or "crashed"
    local msg = err == "timeout" and ("no answer in %d ms"):format(timeout_ms or 60000) or ("the worker %s"):format(err)
    self:restart()
    return { status = status, error = msg }
  end
  local okd, resp = pcall(cjson.decode, line)
  if not okd or type(resp) ~= "table" then
    self:restart()
    return { status = "crashed", error = "the worker answered a line that is not JSON: " .. line:sub(1, 120) }
  end
  self.served = self.served + 1
  return resp
end

function W:close()
  if self.proc then self.proc:kill() end
  self.proc = nil
end

return M
