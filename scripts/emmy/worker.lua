-- emmy.worker — the bench worker: a child `emmy` process that owns the CUDA context and answers one JSON request
-- per line (scripts/worker/main.lua). The parent (the tuner) keeps the DB, the rules and the search; a request
-- that faults the GPU, kills the child or outlives its deadline becomes a row with that status, and the next
-- request finds a fresh child (a faulted CUDA context is gone with the process that owned it).
--   local w = worker.start { device = 0 }     -- nil, msg (device: the CUDA ordinal the child opens)
--   local resp = w:call({op = "ping"}, 5000)  -- resp.status: "ok", …, or "timeout" / "crashed" (restarted)
--   w:submit(req, 5000); local r = w:poll(2) -- the same, without blocking: nil while the request runs
--   w:close()
local cjson = require "cjson"
local sys = require "emmy.sys"

local M = {}

local W = {}
W.__index = W

local function exe() return sys.realpath("/proc/self/exe") or (EMMY_HOME .. "/emmy") end

local function spawn(test, device)
  local argv = { "env", "EMMY_WORKER_DEVICE=" .. tostring(device), exe(), EMMY_HOME .. "/scripts/worker/main.lua" }
  if test then table.insert(argv, 2, "EMMY_WORKER_TEST=1") end
  return sys.spawn(argv)
end

-- opts.test: the child also answers the test-only requests (exit, kill, hang) that tests use to plant faults.
-- opts.device: the CUDA device ordinal the child opens (default 0).
function M.start(opts)
  local test = opts and opts.test or false
  local device = opts and opts.device or 0
  local p, err = spawn(test, device)
  if not p then return nil, "worker: " .. tostring(err) end
  return setmetatable({ proc = p, restarts = 0, served = 0, test = test, device = device }, W)
end

function W:restart()
  if self.proc then self.proc:kill() end
  self.proc = assert(spawn(self.test, self.device))
  self.restarts = self.restarts + 1
end

-- Sends req (a table); its answer comes from W:poll. One request at a time.
function W:submit(req, timeout_ms)
  assert(not self.pending, "worker: a request is already in flight")
  timeout_ms = timeout_ms or 60000
  local ok, err = self.proc:send(cjson.encode(req))
  self.pending = { deadline = sys.clock() + timeout_ms / 1000, timeout_ms = timeout_ms, err = not ok and err or nil }
end

-- The answer to the request in flight, waiting up to wait_ms for it; nil while it is still running and its
-- deadline has not passed. A dead or silent child is killed, restarted and reported as
-- {status = "crashed" | "timeout", error = …}.
function W:poll(wait_ms)
  local p = assert(self.pending, "worker: no request in flight")
  local line, err = nil, p.err
  if not err then
    local left = math.max(0, p.deadline - sys.clock()) * 1000
    line, err = self.proc:recv(math.floor(math.min(wait_ms or left, left)))
    if not line and err == "timeout" and sys.clock() < p.deadline then return nil end
  end
  self.pending = nil
  local timeout_ms = p.timeout_ms
  if not line then
    local status = err == "timeout" and "timeout" or "crashed"
    local msg = err == "timeout" and ("no answer in %d ms"):format(timeout_ms) or ("the worker %s"):format(err)
    self:restart()
    return { status = status, error = msg }
  end
  local okd, resp = pcall(cjson.decode, line)
  if not okd or type(resp) ~= "table" then
    self:restart()
    return { status = "crashed", error = "the worker answered a line that is not JSON: " .. line:sub(1, 120) }
  end
  self.served = self.served + 1
  -- the request faulted the child's CUDA context: it exits after answering; the next request gets a fresh one
  if resp.context_lost then self:restart() end
  return resp
end

-- Sends req and waits up to timeout_ms for the answer (W:submit, then W:poll until it answers).
function W:call(req, timeout_ms)
  self:submit(req, timeout_ms)
  while true do
    local r = self:poll()
    if r then return r end
  end
end

function W:close()
  if self.proc then self.proc:kill() end
  self.proc, self.pending = nil, nil
end

return M
