-- tests/lua/run.lua — runs every tests/lua/test_*.lua (or those whose name contains arg[1]).
-- A test file returns a list of { name, fn }; fn raises on failure or calls skip(reason).
-- Globals for tests: check(cond, msg), eq(a, b, msg), emmy(args, opts) -> code, out, err, tmpdir(), skip(r),
-- TESTS (this folder), ROOT (the checkout), BIN (the emmy binary under test), PY (python3 with torch).
local sys = require "emmy.sys"

ROOT = EMMY_HOME
TESTS = ROOT .. "/tests/lua"
BIN = os.getenv("EMMY_BIN") or (ROOT .. "/emmy")
if BIN:sub(1, 1) ~= "/" then BIN = ROOT .. "/" .. BIN:gsub("^%./", "") end
PY = os.getenv("EMMY_PYTHON") or "/usr/bin/python3"
package.path = TESTS .. "/?.lua;" .. package.path

local Skip = {}

function skip(reason) error(setmetatable({ reason = reason }, Skip), 0) end

function check(cond, msg, level)
  if not cond then error(msg or "check failed", (level or 1) + 1) end
  return cond
end

local function repr(v)
  if type(v) == "string" then return ("%q"):format(v) end
  return tostring(v)
end

function eq(a, b, msg)
  if a ~= b then error(("%s: got %s, expected %s"):format(msg or "eq", repr(a), repr(b)), 2) end
end

local tmp_root = os.tmpname()
os.remove(tmp_root)
assert(sys.mkdir_p(tmp_root))
local ntmp = 0
function tmpdir()
  ntmp = ntmp + 1
  local d = tmp_root .. "/" .. ntmp
  assert(sys.mkdir_p(d))
  return d
end

function shell_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- The mock CUDA driver (tests/fixtures/cuda_mock.c) built into folder d: its path; skips the test without a C compiler.
function mock_driver_so(d)
  local so = d .. "/libcuda_mock.so"
  local code, out = sh(("cc -shared -fPIC -O1 -o %s %s"):format(shell_quote(so), shell_quote(ROOT .. "/tests/fixtures/cuda_mock.c")))
  if code ~= 0 then skip("cannot build the mock driver with cc: " .. tostring(out):gsub("\n", " "):sub(1, 200)) end
  return so
end

local function slurp(path)
  local f = io.open(path, "rb")
  if not f then return "" end
  local s = f:read("*a")
  f:close()
  return s
end
read_file = slurp

function write_file(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

-- Runs the emmy binary with a list of arguments; opts.stdin (text), opts.env ("K=V …"), opts.cwd.
function emmy(args, opts)
  opts = opts or {}
  local d = tmpdir()
  local parts = {}
  for i, a in ipairs(args) do parts[i] = shell_quote(a) end
  local cmd = ("%s%s %s %s >%s/out 2>%s/err"):format(opts.cwd and ("cd " .. shell_quote(opts.cwd) .. " && ") or "",
    opts.env and ("env " .. opts.env) or "", shell_quote(opts.bin or BIN), table.concat(parts, " "), d, d)
  if opts.stdin then
    write_file(d .. "/in", opts.stdin)
    cmd = cmd .. " <" .. d .. "/in"
  else
    cmd = cmd .. " </dev/null"
  end
  local r1, r2, r3 = os.execute(cmd)
  local code = type(r1) == "number" and r1 or r3
  if type(r1) == "number" and r1 > 255 then code = math.floor(r1 / 256) end
  return code, slurp(d .. "/out"), slurp(d .. "/err")
end

-- emmy() with pins (KEY=V items separated by spaces) added to each run's environment, except a pin whose variable the
-- run sets itself: a test file's `local emmy = emmy_pinned("EMMY_MERGE_SIBLINGS=0")`.
function emmy_pinned(pins)
  local base = emmy
  return function(args, opts)
    local o = {}
    for key, v in pairs(opts or {}) do o[key] = v end
    local env = o.env or ""
    for item in pins:gmatch("%S+") do
      if not env:find(item:match("^[^=]+") .. "=", 1, true) then env = item .. (env ~= "" and " " .. env or "") end
    end
    o.env = env
    return base(args, o)
  end
end

-- Runs a shell command; returns exit code and combined output.
function sh(cmd)
  local d = tmpdir()
  local r1, _, r3 = os.execute(cmd .. " >" .. d .. "/out 2>&1")
  local code = type(r1) == "number" and r1 or r3
  if type(r1) == "number" and r1 > 255 then code = math.floor(r1 / 256) end
  return code, slurp(d .. "/out")
end

-- A command's argument list from strings and lists of strings, flattened one level: args("compile", L0, "--nvrtc").
function args(...)
  local t = {}
  for _, a in ipairs { ... } do
    if type(a) == "table" then for _, x in ipairs(a) do t[#t + 1] = x end else t[#t + 1] = a end
  end
  return t
end

function lines_of(s)
  local t = {}
  for l in s:gmatch("[^\n]+") do t[#t + 1] = l end
  return t
end

local filter = arg[1]
local files = {}
for _, f in ipairs(sys.listdir(TESTS)) do
  if f:match("^test_.*%.lua$") then files[#files + 1] = f end
end
local passed, failed, skipped = 0, 0, 0
for _, f in ipairs(files) do
  local chunk, err = loadfile(TESTS .. "/" .. f)
  if not chunk then
    print("FAIL " .. f .. ": " .. err)
    failed = failed + 1
  else
    local ok, list = pcall(chunk)
    if not ok then
      print("FAIL " .. f .. ": " .. tostring(list))
      failed = failed + 1
      list = {}
    end
    for _, t in ipairs(list) do
      local name = f:gsub("%.lua$", ""):gsub("^test_", "") .. "/" .. t[1]
      if not filter or name:find(filter, 1, true) then
        local t0 = sys.clock()
        local ok2, e = xpcall(t[2], function(e)
          if getmetatable(e) == Skip then return e end
          return debug.traceback(tostring(e), 2)
        end)
        local dt = sys.clock() - t0
        if ok2 then
          passed = passed + 1
          print(("ok   lua/%s (%.2fs)"):format(name, dt))
        elseif getmetatable(e) == Skip then
          skipped = skipped + 1
          print(("skip lua/%s (%s)"):format(name, e.reason))
        else
          failed = failed + 1
          print(("FAIL lua/%s\n    %s"):format(name, tostring(e):gsub("\n", "\n    ")))
        end
        io.stdout:flush()
      end
    end
  end
end
os.execute("rm -rf " .. shell_quote(tmp_root))
print(("%d passed, %d failed, %d skipped"):format(passed, failed, skipped))
return failed == 0 and 0 or 1
