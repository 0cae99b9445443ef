-- emmy.cli — errors with exit codes, argument parsing and the command registry shared by every command.
-- A usage error (bad input) exits 2, a runtime failure 1; both print one line "emmy: …".
local sys = require "emmy.sys"

local M = {}

local Err = {}
Err.__index = Err
Err.__tostring = function(e) return e.msg end

-- Raises a usage error (exit 2): the user must change the command or its input.
function M.usage(fmt, ...)
  error(setmetatable({ code = 2, msg = select("#", ...) > 0 and fmt:format(...) or fmt }, Err), 0)
end

-- Raises a runtime failure (exit 1).
function M.fail(fmt, ...)
  error(setmetatable({ code = 1, msg = select("#", ...) > 0 and fmt:format(...) or fmt }, Err), 0)
end

function M.is_error(e) return getmetatable(e) == Err end

-- Returns v, or raises a usage error with msg (for the nil, msg convention of the bindings); a failure
-- returned as nil, msg, 1 (a runtime failure, such as memory) raises with exit code 1 instead.
function M.check(v, msg, ...)
  if v == nil or v == false then
    if select(1, ...) == 1 then M.fail("%s", tostring(msg)) end
    M.usage("%s", tostring(msg))
  end
  return v, msg, ...
end

-- Returns v, or raises a runtime failure (exit 1) with msg: for what failed although the input was good (a file
-- that cannot be written, a full disk).
function M.must(v, msg, ...)
  if v == nil or v == false then M.fail("%s", tostring(msg)) end
  return v, msg, ...
end

-- Runs fn(...) and turns any error into (one line on stderr, exit code). EMMY_DEBUG=1 adds tracebacks.
function M.protect(fn, ...)
  local debug_on = os.getenv("EMMY_DEBUG") == "1"
  local args = { n = select("#", ...), ... }
  local ok, res = xpcall(function() return fn(unpack(args, 1, args.n)) end, function(e)
    if M.is_error(e) then
      if debug_on then io.stderr:write(debug.traceback("emmy: " .. e.msg, 2), "\n") end
      return e
    end
    local msg = tostring(e)
    if debug_on then msg = debug.traceback(msg, 2) end
    return setmetatable({ code = 1, msg = msg, script = true }, Err)
  end)
  if ok then return tonumber(res) or 0 end
  io.stdout:flush()
  if not (M.is_error(res) and debug_on and not res.script) then
    local line = res.msg
    if not debug_on then line = line:match("^[^\n]*") end
    io.stderr:write("emmy: ", line, "\n")
  else
    -- already printed with its traceback
  end
  return res.code
end

-- Parses argv (list) against spec:
--   spec.flags = { ["--layer"] = { kind = "int"|"string"|"bool"|"number", multi = bool, default = v, min = n } }
--   spec.positional = { "input", … } (names; the last may end in "..." to take the rest)
-- Returns opts (flags by name without dashes, '-' replaced by '_') and positional values by name.
function M.parse(argv, spec, cmd)
  local opts, pos = {}, {}
  local flags = spec.flags or {}
  for name, f in pairs(flags) do
    local key = name:gsub("^%-+", ""):gsub("%-", "_")
    if f.multi then opts[key] = {} elseif f.default ~= nil then opts[key] = f.default end
  end
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a:sub(1, 1) == "-" and #a > 1 and not a:match("^%-%d") then
      local name, val = a:match("^(%-%-?[^=]+)=(.*)$")
      name = name or a
      local f = flags[name]
      if not f then M.usage("%s: unknown option '%s' (emmy help %s)", cmd or "emmy", name, cmd or "") end
      local key = name:gsub("^%-+", ""):gsub("%-", "_")
      if f.kind == "bool" then
        if val then M.usage("%s: option %s takes no value", cmd, name) end
        opts[key] = true
      else
        if not val then
          i = i + 1
          val = argv[i]
          if val == nil then M.usage("%s: option %s needs a value", cmd, name) end
        end
        if f.kind == "int" or f.kind == "number" then
          local n = tonumber(val)
          -- finite, and an int within ±2^53 (a double holds each exactly; "inf", "nan" and 1e20 are refused)
          if n and (n ~= n or math.abs(n) == math.huge or (f.kind == "int" and math.abs(n) > 2 ^ 53)) then n = nil end
          if not n or (f.kind == "int" and n ~= math.floor(n)) then
            M.usage("%s: option %s needs %s, got '%s'", cmd, name, f.kind == "int" and "an integer" or "a number", val)
          end
          if f.min and n < f.min then
            M.usage("%s: option %s needs %s >= %s, got '%s'", cmd, name, f.kind == "int" and "an integer" or "a number", f.min, val)
          end
          val = n
        end
        if f.multi then table.insert(opts[key], val) else opts[key] = val end
      end
    else
      table.insert(pos, a)
    end
    i = i + 1
  end
  local names = spec.positional or {}
  local out = {}
  for k, name in ipairs(names) do
    if name:sub(-3) == "..." then
      out[name:sub(1, -4)] = { unpack(pos, k) }
      pos = {}
      break
    end
    out[name] = pos[k]
  end
  if #names > 0 and names[#names]:sub(-3) ~= "..." and #pos > #names then
    M.usage("%s: unexpected argument '%s'", cmd, pos[#names + 1])
  elseif #names == 0 and #pos > 0 then
    M.usage("%s: unexpected argument '%s'", cmd, pos[1])
  end
  for _, name in ipairs(spec.required or {}) do
    if out[name] == nil then M.usage("%s: missing %s (usage: %s)", cmd, name:upper(), spec.usage or ("emmy help " .. cmd)) end
  end
  return opts, out
end

-- x as one POSIX shell word (single-quoted; a quote inside as '\'').
function M.shell_quote(x) return "'" .. (tostring(x):gsub("'", "'\\''")) .. "'" end

-- Runs a shell command: its exit status and its output (stdout and stderr). The status comes from the shell
-- itself (the command in a subshell, so that an exit in it ends only that): LuaJIT's popen close answers true
-- whatever the command did (a failing sbatch read as submitted).
function M.sh(cmd)
  local p = io.popen("( " .. cmd .. "\n) 2>&1; echo \"__emmy_rc=$?\"")
  local out = p:read("*a")
  p:close()
  local code = tonumber(out:match("__emmy_rc=(%d+)%s*$")) or 1
  return code, (out:gsub("__emmy_rc=%d+%s*$", ""))
end

-- Parses repeated NAME=N options into a table, e.g. --bind seq_len=7.
function M.parse_binds(list, flag)
  local t = {}
  for _, s in ipairs(list or {}) do
    local k, v = s:match("^([%a_][%w_]*)=(%-?%d+)$")
    if not k then M.usage("%s '%s' needs NAME=INT", flag or "--bind", s) end
    if t[k] then M.usage("%s %s is given twice (%s and %s): give it once", flag or "--bind", k, t[k], v) end
    t[k] = tonumber(v) -- range and integrality are checked against the symbol when bound (g:bind)
  end
  return t
end

-- Sets of knob assignments, "K=V,K=V;K=V" (a bench's --match and --pins): a list of {KNOB = value} tables, each
-- knob and value legal in the knob table; nil for nil. A bad item, a knob twice in one set, or no knob at all is a
-- usage error naming cmd and flag.
function M.knob_sets(cmd, flag, s)
  if not s then return nil end
  local knobs = require "emmy.knobs"
  local sets = {}
  for set in s:gmatch("[^;]+") do
    local m, n = {}, 0
    for item in set:gmatch("[^,]+") do
      local k, v = item:match("^%s*([%w_]+)=(%-?%d+)%s*$")
      if not k then M.usage("%s: %s item '%s' needs KNOB=INT (sets K=V,K=V separated by ';')", cmd, flag, item) end
      local ok, why = knobs.check(k, tonumber(v))
      if not ok then M.usage("%s: %s '%s': %s", cmd, flag, item, why) end
      if m[k] then M.usage("%s: %s gives %s twice in one set ('%s')", cmd, flag, k, set) end
      m[k], n = tonumber(v), n + 1
    end
    if n > 0 then sets[#sets + 1] = m end
  end
  if #sets == 0 then M.usage("%s: %s '%s' names no knob; give K=V,K=V;K=V", cmd, flag, s) end
  return sets
end

M.commands_dir = EMMY_HOME .. "/scripts/commands"

-- Loads scripts/commands/NAME.lua (a table with summary, usage, run); nil when there is none.
function M.load_command(name)
  if not name:match("^[%w_%-]+$") then return nil end
  local path = M.commands_dir .. "/" .. name .. ".lua"
  if sys.stat(path) ~= "file" then return nil end
  local chunk, err = loadfile(path)
  if not chunk then error(err, 0) end
  local cmd = chunk()
  if type(cmd) ~= "table" or type(cmd.run) ~= "function" then
    error(path .. ": a command file must return { summary =, usage =, run = function(argv) }", 0)
  end
  cmd.name = name
  return cmd
end

function M.list_commands()
  local out = {}
  for _, f in ipairs(sys.listdir(M.commands_dir) or {}) do
    local name = f:match("^([%w_%-]+)%.lua$")
    if name then
      local ok, cmd = pcall(M.load_command, name)
      if ok and cmd then table.insert(out, cmd) end
    end
  end
  return out
end

return M
