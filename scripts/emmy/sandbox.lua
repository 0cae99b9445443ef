-- emmy.sandbox — where rule files (rules/tile/, rules/prior/) run, and what they may reach and spend.
-- A rule file is read as text (at most LIMITS.file_bytes) into an environment holding only the rule API: an
-- unknown global is an error at once. The JIT is off for every function of a rule file, so that the count hook
-- below interrupts any loop of theirs (LuaJIT never calls hooks inside compiled traces).
-- Every call into rule code (a file's body, a gate, a fork, a prior formula) goes through M.call, which for that
-- call alone
--   · counts VM instructions and CPU time in a count hook (LIMITS.instructions, LIMITS.cpu_s);
--   · bounds memory twice: the hook checks the bytes the state holds against LIMITS.memory, and emmy.budget
--     refuses any allocation past LIMITS.memory + LIMITS.memory_slack (one large allocation between two ticks);
--   · points the string metatable at the sandbox's string library, so ("").dump is nil and pattern matching,
--     string.rep and gsub/sort callbacks are bounded (a C-level match cannot be interrupted by the hook);
--   · hands tables in as read-only views (writing to one is an error naming the rule);
--   · maps every error, whatever its object (error({}), error(), a budget, an allocation refused), to one line
--     "FILE:LINE: WHAT: message" naming the rule file and the line.
local budget = require "emmy.budget"

local M = {}

M.LIMITS = {
  instructions = 5e7,       -- VM instructions per call (the interpreter runs about 2e8 a second)
  cpu_s = 2,                -- CPU seconds per call: time spent in library functions, between two ticks
  memory = 256 * 2 ^ 20,    -- bytes a call may add to what the Lua state holds (checked at every tick)
  memory_slack = 64 * 2 ^ 20, -- past memory + slack an allocation fails at once (emmy.budget)
  match_steps = 2e7,        -- estimated steps of one pattern match (string.find/match/gmatch/gsub)
  nesting = 8,              -- string.gsub / table.sort nested through their callbacks
  sort_items = 1e6,         -- elements table.sort takes
  file_bytes = 4 * 2 ^ 20,  -- a rule file's size
  message = 300,            -- characters kept of a rule's error message
}
local TICK = 10000          -- instructions between two checks of the hook

local str, getinfo, sethook, gethook = string, debug.getinfo, debug.sethook, debug.gethook
local SMT = getmetatable("")
local HOST_STRING = SMT.__index

-- The state of the call in progress (one at a time: M.call does not nest).
local st = { depth = 0, chunks = {} }

local function pack(...) return { n = select("#", ...), ... } end
M.pack = pack

-- The innermost frame of rule code on the stack from level on: file, line (nil when there is none).
local function where(level)
  for l = level, level + 200 do
    local info = getinfo(l, "Sl")
    if not info then return nil end
    if st.chunks[info.source] and (info.currentline or 0) > 0 then return info.source:sub(2), info.currentline end
  end
end

local function over(msg)
  st.over = msg
  error(msg, 0)
end

local function tick()
  if st.over or st.depth == 0 then return end
  st.ticks = st.ticks + 1
  local f, l = where(3)
  if f then st.last_file, st.last_line = f, l end
  local L = M.LIMITS
  if st.ticks * TICK > L.instructions then
    over(("time budget exceeded: more than %d VM instructions in one call (an endless loop?)"):format(L.instructions))
  end
  if not st.t0 then st.t0 = budget.cpu() end -- the call's first 10^4 instructions are not counted: no clock read a call
  if budget.cpu() - st.t0 > L.cpu_s then
    over(("time budget exceeded: more than %g s of CPU in one call"):format(L.cpu_s))
  end
  if collectgarbage("count") * 1024 - st.mem0 > L.memory then
    over(("memory budget exceeded: more than %d MB held in one call"):format(L.memory / 2 ^ 20))
  end
end

local function fail(fmt, ...) error(str.format(fmt, ...), 0) end

-- ---- read-only views --------------------------------------------------------------------------------------

local getmt = debug.getmetatable

local function ro_newindex(v, key)
  local name = getmt(v).name
  fail("%s.%s: %s is read-only (rules may not change the facts they are given)", name, tostring(key), name)
end

-- A read-only view of t for the call in progress: reads go to t (its tables as views, held in the view itself),
-- writing a new key is an error at once; t's array part is copied in, so #, ipairs, unpack and table.concat work.
-- A write over a key the view holds (an array element, a nested table; table.insert, table.sort) is found when the
-- call returns (changed_view).
local function view(t, name)
  local v = st.views[t]
  if v then return v end
  v = {}
  st.views[t] = v
  st.viewlist[#st.viewlist + 1] = v
  local n = #t
  for key, x in next, t do
    if type(x) == "table" then
      rawset(v, key, view(x, type(key) == "number" and (name .. "[" .. key .. "]") or (name .. "." .. tostring(key))))
    elseif type(key) == "number" and key >= 1 and key <= n and key % 1 == 0 then
      rawset(v, key, x)
    end
  end
  return setmetatable(v, { __index = t, __newindex = ro_newindex, __metatable = false, t = t, name = name })
end

-- The view's original table, or nil when x is not a view.
local function original(x)
  local mt = getmt(x)
  return mt and mt.__newindex == ro_newindex and mt.t or nil
end

-- The first change a rule made to a key a view of this call holds: "k.ops[2]" or nil.
local function changed_view(list)
  for _, v in ipairs(list) do
    local mt = getmt(v)
    local t = mt.t
    for key, x in next, t do
      local want = type(x) == "table" and st.views[x] or x
      local held = rawget(v, key)
      if held ~= nil and held ~= want then return ("%s[%s]"):format(mt.name, tostring(key)) end
      if held == nil and type(x) == "table" then return ("%s.%s"):format(mt.name, tostring(key)) end
    end
    for key in next, v do
      if rawget(t, key) == nil then return ("%s[%s]"):format(mt.name, tostring(key)) end
    end
    local n = #t
    for i = 1, n do
      if rawget(v, i) == nil then return ("%s[%d]"):format(mt.name, i) end
    end
  end
end

local function s_next(t, key)
  local o = original(t)
  if not o then return next(t, key) end
  local k2, x = next(o, key)
  if type(x) == "table" then x = rawget(t, k2) end -- the nested view the view holds
  return k2, x
end

local function s_pairs(t)
  if original(t) then return s_next, t, nil end
  return pairs(t)
end

-- ---- the string library rules see -------------------------------------------------------------------------

-- The unbounded quantifiers of Lua pattern p (*, +, -, %b, back-references) and its optional items (?).
local function quantifiers(p)
  local q, opt, i, m = 0, 0, 1, #p
  local b = str.byte
  while i <= m do
    local c = b(p, i)
    if c == 37 then -- %x
      local d = b(p, i + 1)
      if d == 98 then q, i = q + 1, i + 4            -- %bxy
      elseif d == 102 then i = i + 2                -- %f[set]: the set follows
      else
        if d and d >= 49 and d <= 57 then q = q + 1 end -- %1-%9
        i = i + 2
      end
    elseif c == 91 then -- [set]: the first character after [ or [^ is literal, %x escapes
      i = i + 1
      if b(p, i) == 94 then i = i + 1 end
      repeat
        if b(p, i) == 37 then i = i + 1 end
        i = i + 1
      until i > m or b(p, i) == 93
      i = i + 1
    elseif c == 42 or c == 43 or c == 45 then q, i = q + 1, i + 1
    elseif c == 63 then opt, i = opt + 1, i + 1
    else i = i + 1 end
  end
  return q, opt
end

-- Refuses a match whose backtracking could run long: about (n+1)^(q+1) * 2^opt * (m+1) steps for a subject of
-- n bytes and a pattern of m with q unbounded quantifiers (fewer starts when anchored).
local function guard_match(fname, s, p, plain, anchorable)
  if type(s) == "number" then s = tostring(s) end
  if type(p) == "number" then p = tostring(p) end
  if type(s) ~= "string" or type(p) ~= "string" then return end -- the library raises the type error
  local n, m = #s, #p
  local q, opt = 0, 0
  if not plain then q, opt = quantifiers(p) end
  local starts = (anchorable and not plain and str.byte(p, 1) == 94) and 1 or (n + 1)
  local cost = starts * (n + 1) ^ q * 2 ^ opt * (m + 1)
  if cost > M.LIMITS.match_steps then
    fail("string.%s: pattern '%s' on a %d-byte subject could take ~%.0e steps (the sandbox allows %.0e; a shorter subject or fewer quantifiers)",
      fname, #p > 40 and (p:sub(1, 40) .. "...") or p, n, cost, M.LIMITS.match_steps)
  end
end

-- Calls f(...) counting how deep gsub/sort calls nest through their callbacks (the C stack grows with each).
local function nested(what, f, ...)
  if st.nest >= M.LIMITS.nesting then
    fail("%s nested %d deep through callbacks (the sandbox allows %d)", what, st.nest + 1, M.LIMITS.nesting)
  end
  st.nest = st.nest + 1
  local r = pack(f(...))
  st.nest = st.nest - 1
  return unpack(r, 1, r.n)
end

local S = {
  format = str.format, sub = str.sub, len = str.len, lower = str.lower, upper = str.upper, byte = str.byte,
  char = str.char, reverse = str.reverse,
}
function S.rep(s, n, sep)
  if type(n) == "number" and (type(s) == "string" or type(s) == "number") then
    local len = math.max(0, n) * #tostring(s) + math.max(0, n - 1) * #tostring(sep or "")
    if len > M.LIMITS.memory then
      fail("string.rep: a string of %.0f bytes is over the sandbox's memory budget (%d MB)", len, M.LIMITS.memory / 2 ^ 20)
    end
  end
  return str.rep(s, n, sep)
end
function S.find(s, p, init, plain)
  guard_match("find", s, p, plain, true)
  return str.find(s, p, init, plain)
end
function S.match(s, p, init)
  guard_match("match", s, p, false, true)
  return str.match(s, p, init)
end
function S.gmatch(s, p)
  guard_match("gmatch", s, p, false, false)
  return str.gmatch(s, p)
end
function S.gsub(s, p, repl, n)
  guard_match("gsub", s, p, false, true)
  if type(repl) == "function" then return nested("string.gsub", str.gsub, s, p, repl, n) end
  return str.gsub(s, p, repl, n)
end

local T = { insert = table.insert, concat = table.concat }
function T.sort(t, lt)
  if type(t) == "table" and #t > M.LIMITS.sort_items then
    fail("table.sort: %d elements (the sandbox sorts at most %d)", #t, M.LIMITS.sort_items)
  end
  if lt ~= nil then return nested("table.sort", table.sort, t, lt) end
  return table.sort(t)
end

-- ---- loading -----------------------------------------------------------------------------------------------

-- The name errors give a file of folder dir: label .. "/" .. f for emmy's own folder home, else the path as given.
function M.display(dir, home, label)
  local sys = require "emmy.sys"
  local a, b = sys.realpath(dir), sys.realpath(home)
  if a and b and a == b then return label end
  return dir
end

-- The rule environment of folder dir (shown as display in messages): the rule API only; `use "_name"` runs a
-- helper file of the same folder once and returns its value.
function M.env(dir, display)
  local env = {
    ipairs = ipairs, pairs = s_pairs, next = s_next, tostring = tostring, tonumber = tonumber, type = type,
    select = select, error = error, assert = assert, unpack = unpack,
    math = { floor = math.floor, ceil = math.ceil, max = math.max, min = math.min, huge = math.huge, sqrt = math.sqrt,
      log = math.log, abs = math.abs },
    string = S, table = T,
  }
  local cache, LOADING = {}, {}
  env.use = function(name)
    if type(name) ~= "string" or not str.match(name, "^_[%w_]+$") or #name > 64 then
      fail("use: helper names start with '_' (got '%s')", tostring(name))
    end
    if cache[name] == LOADING then fail("use '%s': the helper uses itself while it loads", name) end
    if cache[name] == nil then
      cache[name] = LOADING
      local chunk = M.compile(env, dir .. "/" .. name .. ".lua", display .. "/" .. name .. ".lua")
      local v = chunk()
      if v == nil then v = false end
      cache[name] = v
    end
    return cache[name]
  end
  return setmetatable(env, {
    __index = function(_, k) fail("unknown global '%s' (rules see only the rule API)", tostring(k)) end,
    __newindex = function(_, k) fail("rules may not set globals ('%s')", tostring(k)) end,
    __metatable = false,
  })
end

-- The rule file at path as a function of env (shown as display in errors: its chunk name); raises one line.
function M.compile(env, path, display)
  local f, err = io.open(path, "rb")
  if not f then fail("%s: cannot read the rule file (%s)", display, tostring(err)) end
  local size = f:seek("end")
  if not size or size > M.LIMITS.file_bytes then
    f:close()
    fail("%s:1: the file is %s bytes; a rule file may hold at most %d MB", display, tostring(size), M.LIMITS.file_bytes / 2 ^ 20)
  end
  f:seek("set")
  local text = f:read("*a")
  f:close()
  if not text then fail("%s:1: cannot read the rule file (a folder?)", display) end
  local chunk, perr = load(text, "@" .. display, "t")
  if not chunk then
    perr = tostring(perr):gsub("[%c]+", " ")
    if perr:find("wrong mode", 1, true) then fail("%s:1: a rule file is Lua source text, not bytecode", display) end
    fail("%s", perr)
  end
  setfenv(chunk, env)
  jit.off(chunk, true)
  st.chunks["@" .. display] = true
  return chunk
end

-- Runs the rule file at path in env; returns its value, which must be a table (else one line: `what`).
function M.run_file(env, path, display, what)
  local chunk = M.compile(env, path, display)
  local v = M.call({ file = display, line = 1 }, chunk)
  if type(v) ~= "table" then fail("%s:1: %s (it returned %s)", display, what, type(v)) end
  return v
end

-- ---- calls -------------------------------------------------------------------------------------------------

local MARK = {}

local function handler(e)
  sethook()
  budget.ceiling(nil)
  local file, line = where(2)
  return { [MARK] = true, e = e, file = file, line = line }
end

local function runner(fn, ...)
  SMT.__index = S
  budget.ceiling(M.LIMITS.memory + M.LIMITS.memory_slack)
  sethook(tick, "", TICK)
  local r = pack(fn(...))
  sethook()
  budget.ceiling(nil)
  return r
end

local function one_line(msg)
  msg = msg:gsub("[%c]+", " ")
  if #msg > M.LIMITS.message then msg = msg:sub(1, M.LIMITS.message) .. "..." end
  return msg
end

-- The message of error object e: a string as it is, anything else described.
local function describe(e)
  local t = type(e)
  if t == "string" then return e end
  if t == "nil" then return "error raised with no message (nil)" end
  if t == "number" or t == "boolean" then return ("error raised with the %s %s as its message"):format(t, tostring(e)) end
  return ("error raised with a %s as its message (rules raise strings)"):format(t)
end

-- One line for call `at` that failed with r (the handler's table, or the raw object LuaJIT gave past it).
local function message(at, r, refused)
  local file, line, msg
  if type(r) == "table" and r[MARK] then
    file, line, msg = r.file, r.line, describe(r.e)
  else
    msg = describe(r)
  end
  if st.over then msg = st.over
  elseif refused then
    msg = ("memory budget exceeded: an allocation past %d MB in one call was refused"):format(
      (M.LIMITS.memory + M.LIMITS.memory_slack) / 2 ^ 20)
    file, line = st.last_file, st.last_line
  end
  -- a message placed by error() in a rule file ("rules/tile/F.lua:12: msg") keeps its place
  local pf, pl, rest = msg:match("^(.-):(%d+): (.*)$")
  if pf and st.chunks["@" .. pf] then file, line, msg = pf, tonumber(pl), rest end
  if not file then file, line = st.last_file or at.file, st.last_line or at.line end
  return ("%s:%d: %s%s"):format(file, line or 0, at.what and (at.what .. ": ") or "", one_line(msg))
end

-- Calls fn(...) as rule code on behalf of `at` = {file, line (where fn is defined), what ("gate NAME"), views =
-- {names of the leading arguments to hand in read-only}}: under the budgets, with the sandbox's string library
-- behind the string metatable. Returns fn's results; raises one line "FILE:LINE: WHAT: message". A call made
-- from inside rule code runs within the budget of the call in progress.
function M.call(at, fn, ...)
  if st.depth > 0 then return fn(...) end
  st.depth, st.ticks, st.over, st.nest = 1, 0, nil, 0
  st.views, st.viewlist, st.last_file, st.last_line = {}, {}, nil, nil
  local args = pack(...)
  for i, name in ipairs(at.views or {}) do
    if type(args[i]) == "table" then args[i] = view(args[i], name) end
  end
  local h, hm, hc = gethook()
  st.t0, st.mem0 = nil, collectgarbage("count") * 1024
  local ok, r = xpcall(runner, handler, fn, unpack(args, 1, args.n))
  -- the runner (or the handler) took its hook off; a hook the host had goes back on
  if h then sethook(h, hm, hc) end
  local refused = budget.refused()
  budget.ceiling(nil)
  SMT.__index = HOST_STRING
  st.depth = 0
  local list = st.viewlist
  if not ok then
    local msg = message(at, r, refused)
    st.views, st.viewlist = nil, nil
    error(msg, 0)
  end
  local ch = changed_view(list)
  st.views, st.viewlist = nil, nil
  if ch then
    error(("%s:%d: %schanged %s (rules may not change the facts they are given)"):format(at.file, at.line or 0,
      at.what and (at.what .. ": ") or "", ch), 0)
  end
  return unpack(r, 1, r.n)
end

-- The line a rule function is defined on (0 for anything else).
function M.line_of(fn)
  local info = type(fn) == "function" and getinfo(fn, "S")
  return info and info.linedefined or 0
end

return M
