-- emmy.rules — runs the tiling rules of rules/tile/ (or $EMMY_RULES) on a kernel: every gate's verdict with
-- its reason, the candidate knob assignments of the families whose gates passed (the leaves of the fork
-- tree), the resource check of each candidate, and knob pins (EMMY_KNOBS, EMMY_<KNOB>).
-- Rule files run in emmy.sandbox (the rule API only, budgets per call, read-only facts); what they return is
-- checked here: a malformed rule, gate verdict, fork option or knob value is one line naming the rule file and
-- line, and so is a kernel the rules give no candidate. Every knob a rule declares or a fork returns, and every
-- pinned knob, is checked against the knob table too (src/knobs.h, `require "emmy.knobs"`): a name it lacks or
-- a value it does not take is an error naming the rule.
local sandbox = require "emmy.sandbox"
local sys = require "emmy.sys"
local knobs = require "emmy.knobs"

local M = {}

-- A pin the environment got wrong is a usage error (exit 2): one line, what to change.
local function usage(fmt, ...) require("emmy.cli").usage(fmt, ...) end

function M.dir() return os.getenv("EMMY_RULES") or (EMMY_HOME .. "/rules/tile") end

-- Bounds on what rules return. A knob value is a C int of the emitter, and no knob is negative.
M.KNOB_MIN, M.KNOB_MAX = 0, 2 ^ 31 - 1
M.MAX_OPTIONS = 10000   -- option tables one fork call returns
M.MAX_KNOB_NAME = 15    -- characters of a knob name
M.MAX_KNOBS = #require("emmy.knobs").list() -- knobs one assignment holds (every knob of the table)
M.MAX_LEAVES = 250000   -- leaves of one kernel's fork product (Qwen3's contractions have about 31,000)
local FIELDS = { name = "string", family = "string", kinds = "table", knobs = "table", gate = "function", fork = "function" }

local function fail(fmt, ...) error(fmt:format(...), 0) end

local function knob_name_ok(key)
  return type(key) == "string" and key:match("^[A-Z][A-Z0-9_]*$") ~= nil and #key <= M.MAX_KNOB_NAME
end

local function knob_value_ok(v)
  return type(v) == "number" and v == math.floor(v) and v >= M.KNOB_MIN and v <= M.KNOB_MAX
end

local function show(v)
  if type(v) == "string" then return (("'%s'"):format(#v > 40 and (v:sub(1, 40) .. "...") or v):gsub("[%c]", "?")) end
  return tostring(v)
end

-- A host copy of the rule r (a sandbox table) of file (at index i of its list), checked: unknown fields, names,
-- kinds and declared knobs are errors naming the file and the rule's line.
local function checked_rule(r, file, i, path)
  if type(r) ~= "table" then fail("%s:1: rule %d is a %s, not a table {name = ..., family = ...}", file, i, type(r)) end
  local line = sandbox.line_of(r.gate) > 0 and sandbox.line_of(r.gate) or sandbox.line_of(r.fork)
  local at = ("%s:%d: rule %s"):format(file, line > 0 and line or 1, type(r.name) == "string" and show(r.name) or tostring(i))
  for key, v in pairs(r) do
    if not FIELDS[key] then
      fail("%s: unknown field %s (a rule has name, family, kinds, knobs, gate, fork)", at, show(key))
    end
    if type(v) ~= FIELDS[key] then fail("%s: %s is a %s, not a %s", at, key, type(v), FIELDS[key]) end
  end
  if type(r.name) ~= "string" or type(r.family) ~= "string" then fail("%s: needs a name and a family", at) end
  if not r.name:match("^[%w_.%-]+$") or #r.name > 64 then fail("%s: a name is letters, digits, _ . - (64 at most)", at) end
  if not r.family:match("^[%w_]+$") or #r.family > 32 then fail("%s: family %s: letters, digits and _ (32 at most)", at, show(r.family)) end
  local out = { name = r.name, family = r.family, gate = r.gate, fork = r.fork, file = file,
    line = sandbox.line_of(r.gate), fork_line = sandbox.line_of(r.fork), path = path }
  if r.kinds then
    out.kinds = {}
    for j, x in pairs(r.kinds) do
      if type(j) ~= "number" or type(x) ~= "string" then fail("%s: kinds is a list of kind names", at) end
      out.kinds[#out.kinds + 1] = x
    end
  end
  if r.knobs then
    out.knobs = {}
    for key, v in pairs(r.knobs) do
      if not knob_name_ok(key) then
        fail("%s: knob %s: a knob name is A-Z, 0-9, _ (%d characters at most)", at, show(key), M.MAX_KNOB_NAME)
      end
      if not knob_value_ok(v) then
        fail("%s: knob %s's default %s is not an integer in %d..%d", at, key, show(v), M.KNOB_MIN, M.KNOB_MAX)
      end
      out.knobs[key] = v
    end
  end
  return out
end

-- Loads every NNN_*.lua rule file; returns list of rules {name, family, kinds, knobs, gate, fork, file, line
-- (the gate's), fork_line} or raises one line naming the file. A folder without rule files is an error.
function M.load(dir)
  dir = dir or M.dir()
  local files = sys.listdir(dir)
  local from_env = os.getenv("EMMY_RULES") == dir
  if not files then error(("rules folder %s does not exist (EMMY_RULES)"):format(dir), 0) end
  local display = sandbox.display(dir, EMMY_HOME .. "/rules/tile", "rules/tile")
  local env = sandbox.env(dir, display)
  local out = {}
  for _, f in ipairs(files) do
    if f:match("^%d+_.*%.lua$") then
      local file = display .. "/" .. f
      local list = sandbox.run_file(env, dir .. "/" .. f, file, "a rule file must return a list of rules")
      local n = #list
      for key in pairs(list) do
        if type(key) ~= "number" or key < 1 or key > n or key % 1 ~= 0 then
          fail("%s:1: a rule file returns a list of rules ({ { name = ..., family = ... }, ... }); it has the key %s", file, show(key))
        end
      end
      for i = 1, n do
        local cr = checked_rule(list[i], file, i, dir .. "/" .. f)
        M.check_declared(cr)
        out[#out + 1] = cr
      end
    end
  end
  if #out == 0 then
    fail("rules folder %s%s holds no rules (files NNN_name.lua returning a list of rules)", dir, from_env and " (EMMY_RULES)" or "")
  end
  return out
end

-- Checks the knobs rule r declares (r.knobs = {KNOB = default}) against the knob table: each is a knob of the
-- table, of the rule's family, and its default is one of its legal values; else raises one line naming the rule's
-- file and line and the knob.
function M.check_declared(r)
  if r.knobs ~= nil and type(r.knobs) ~= "table" then
    error(("%s:%d: rule %s: knobs must be a table {KNOB = default}"):format(r.file, r.line, r.name), 0)
  end
  local keys = {}
  for key in pairs(r.knobs or {}) do keys[#keys + 1] = tostring(key) end
  table.sort(keys)
  for _, key in ipairs(keys) do
    local def = r.knobs[key]
    local ok, why = knobs.check(key, def)
    if not ok then
      error(("%s:%d: rule %s declares %s=%s: %s"):format(r.file, r.line, r.name, key, tostring(def), why), 0)
    end
    local fam = knobs.info(key).family
    if fam ~= r.family then
      error(("%s:%d: rule %s (family %s) declares %s, a knob of family %s in the knob table (src/knobs.h)"):format(
        r.file, r.line, r.name, r.family, key, fam), 0)
    end
  end
end

-- Checks the option tables a fork of rule r returned: every knob in the knob table, every value legal; else raises
-- one line naming the rule's file, the fork's line and the knob.
local function check_options(r, list)
  for _, o in ipairs(list) do
    if type(o) ~= "table" then
      error(("%s: fork %s must return a list of option tables (got a %s in it)"):format(r.file, r.name, type(o)), 0)
    end
    for key, v in pairs(o) do
      local ok, why = knobs.check(tostring(key), v)
      if not ok then
        local info = debug.getinfo(r.fork, "S")
        error(("%s:%d: fork %s returns %s=%s: %s"):format(r.file, info and info.linedefined or 0, r.name, tostring(key),
          tostring(v), why), 0)
      end
    end
  end
end

local function applies(r, k)
  if not r.kinds then return true end
  for _, x in ipairs(r.kinds) do if x == k.kind then return true end end
  return false
end

function M.knob_string(knobs)
  local keys = {}
  for key in pairs(knobs) do keys[#keys + 1] = key end
  table.sort(keys)
  return M.knob_string_in(knobs, keys)
end

-- M.knob_string where the caller knows the knobs' keys, sorted (every leaf of one evaluation has the same keys:
-- sorting them once a kernel instead of once a leaf was two thirds of a layer's planning time).
local pair_text = setmetatable({}, { __index = function(t, key)
  local byv = setmetatable({}, { __index = function(u, v) local s = key .. "=" .. tostring(v); u[v] = s; return s end })
  t[key] = byv
  return byv
end }) -- ("KEY=v" strings made once: a layer's ~10^5 leaves repeat a few hundred of them)
function M.knob_string_in(knobs, keys)
  local parts = {}
  for i = 1, #keys do local key = keys[i]; parts[i] = pair_text[key][knobs[key]] end
  return table.concat(parts, ",")
end

-- The codes that name a leaf by a number: the knobs some family's option sets (sorted), code[key][value] (0 the
-- default, then each value an option gives) and each key's weight in the mixed radix; nil where the product of the
-- keys' value counts passes 2^52 (the caller then names leaves by their knob strings).
local function leaf_codes(fam_order, fam_opts, defaults)
  local code, vkeys = {}, {}
  for _, f in ipairs(fam_order) do
    for _, o in ipairs(fam_opts[f] or {}) do
      for key, v in pairs(o) do
        local cd = code[key]
        if not cd then
          cd = { n = 1, [defaults[key]] = 0 }
          code[key] = cd
          vkeys[#vkeys + 1] = key
        end
        if cd[v] == nil then cd[v] = cd.n; cd.n = cd.n + 1 end
      end
    end
  end
  table.sort(vkeys)
  local weight, prod = {}, 1
  for i, key in ipairs(vkeys) do
    weight[i] = prod
    prod = prod * code[key].n
    if prod > 2 ^ 52 then return nil end
  end
  return vkeys, code, weight
end

-- The leaves of the fork tree, one at a time: fn(c) for each leaf of the cartesian product of the families' options
-- (fam_order: family names; fam_opts[family] = {option table, ...}; a family with no options skipped), walked like an
-- odometer and never built, c one scratch table reused from leaf to leaf — the defaults of every key of keys, then
-- each family's current option over them, a later family's overriding an earlier one's knob; fn copies what it keeps.
-- A layer's planning walks ~4 x 10^5 leaves, ~90% of them rejected by the resource check: a fresh table a leaf and
-- the defaults filled through pairs() were half of its ~3 s (jit.profile, twenty-ninth session).
function M.each_leaf(fam_order, fam_opts, defaults, keys, fn)
  local kv = {} -- kv[i][j]: family i's option j as a flat list key, value, key, value, ...
  for _, f in ipairs(fam_order) do
    local opts = fam_opts[f]
    if opts and #opts > 0 then
      local fk = {}
      for j, o in ipairs(opts) do
        local t = {}
        for key, v in pairs(o) do t[#t + 1] = key; t[#t + 1] = v end
        fk[j] = t
      end
      kv[#kv + 1] = fk
    end
  end
  local n, idx, c = #kv, {}, {}
  for i = 1, n do idx[i] = 1 end
  while true do
    for i = 1, #keys do local key = keys[i]; c[key] = defaults[key] end
    for i = 1, n do
      local t = kv[i][idx[i]]
      for p = 1, #t, 2 do c[t[p]] = t[p + 1] end
    end
    fn(c)
    local i = n
    while i >= 1 do
      idx[i] = idx[i] + 1
      if idx[i] <= #kv[i] then break end
      idx[i] = 1
      i = i - 1
    end
    if i < 1 then return end
  end
end

-- A verdict's reason on one line (it is printed in tables and recorded).
local function reason_line(s)
  s = s:gsub("[%c]+", " ")
  if #s > 300 then s = s:sub(1, 300) .. "..." end
  return s
end

-- The line of rule r's gate that refused with reason, the condition a refusal cites: among the gate's lines, the
-- one `return false` whose string literals' fixed text (between format specifiers) all occur in the reason, in
-- order; else the only `return false` there is; else the gate's first line.
local source_lines = {}
local function refusal_line(r, reason)
  local info = r.path and type(r.gate) == "function" and debug.getinfo(r.gate, "S")
  if not info then return r.line end
  local lines = source_lines[r.path]
  if not lines then
    lines = {}
    local f = io.open(r.path, "rb")
    if not f then return r.line end
    for l in f:lines() do lines[#lines + 1] = l end
    f:close()
    source_lines[r.path] = lines
  end
  local matched, returns = {}, {}
  for n = info.linedefined, info.lastlinedefined do
    local l = lines[n] or ""
    if l:find("return false", 1, true) then
      returns[#returns + 1] = n
      local pos, any, all = 1, false, true
      for lit in l:gmatch('"([^"]*)"') do
        for chunk in (lit:gsub("%%[%-%d%.]*%a", "\0") .. "\0"):gmatch("([^%z]*)%z") do
          if #chunk >= 3 then
            local a, b = (reason or ""):find(chunk, pos, true)
            if a then pos, any = b + 1, true else all = false end
          end
        end
      end
      if any and all then matched[#matched + 1] = n end
    end
  end
  if #matched == 1 then return matched[1] end
  if #returns == 1 then return returns[1] end
  return r.line
end
M.refusal_line = refusal_line

-- Calls rule r's gate on (k, dev) in the sandbox; returns ok, reason or raises one line naming the rule.
local function run_gate(r, k, dev)
  local at = { file = r.file, line = r.line, what = "gate " .. r.name, views = { "k", "dev" } }
  local r1 = sandbox.pack(sandbox.call(at, r.gate, k, dev))
  local ok, reason = r1[1], r1[2]
  if type(ok) ~= "boolean" or (reason ~= nil and type(reason) ~= "string") or r1.n > 2 then
    local got = {}
    for i = 1, r1.n do got[i] = type(r1[i]) end
    fail("%s:%d: gate %s returned (%s); a gate returns ok (a boolean) and a reason (a string)", r.file, r.line, r.name,
      table.concat(got, ", "))
  end
  return ok, reason and reason_line(reason)
end

-- Calls rule r's fork on (k, dev) in the sandbox; returns host copies of its option tables {KNOB = value} or
-- raises one line naming the rule (a knob no rule declares is checked by the caller, once every rule is read).
local function run_fork(r, k, dev)
  local ir = require "emmy.ir"
  local line = r.fork_line
  local at = { file = r.file, line = line, what = "fork " .. r.name, views = { "k", "dev" } }
  local r1 = sandbox.pack(sandbox.call(at, r.fork, k, dev))
  local list = r1[1]
  local where = ("%s:%d: fork %s"):format(r.file, line, r.name)
  if type(list) ~= "table" or r1.n ~= 1 then
    fail("%s returned %s; a fork returns one list of option tables", where, r1.n == 1 and ("a " .. type(list)) or (r1.n .. " values"))
  end
  if getmetatable(list) ~= nil then fail("%s returned one of the facts it was given, not a new list of options", where) end
  local n = #list
  if n > M.MAX_OPTIONS then fail("%s returned %d options; a fork call returns at most %d", where, n, M.MAX_OPTIONS) end
  for key in pairs(list) do
    if type(key) ~= "number" or key < 1 or key > n or key % 1 ~= 0 then
      fail("%s returned a table with the key %s; a fork returns a list of option tables", where, show(key))
    end
  end
  local out = {}
  for i = 1, n do
    local o = list[i]
    if type(o) ~= "table" then fail("%s: option %d is a %s, not a table {KNOB = value}", where, i, type(o)) end
    if getmetatable(o) ~= nil then fail("%s: option %d is one of the facts it was given, not a new option table", where, i) end
    local c, nk = {}, 0
    for key, v in pairs(o) do
      nk = nk + 1
      if nk > M.MAX_KNOBS then fail("%s: option %d sets more than %d knobs", where, i, M.MAX_KNOBS) end
      if not knob_name_ok(key) then fail("%s: option %d: %s is not a knob name (A-Z, 0-9, _)", where, i, show(key)) end
      if not knob_value_ok(v) then
        fail("%s: option %d sets %s=%s; a knob value is an integer in %d..%d", where, i, key, show(v), M.KNOB_MIN, M.KNOB_MAX)
      end
      c[key] = v
    end
    out[i] = c
  end
  return out
end

-- Evaluates the rules on kernel facts k and device facts dev.
-- Returns { verdicts = {{rule, family, file, line, ok, reason}}, declared = {KNOB = default},
--           family_of = {KNOB = FAMILY}, set_by = {KNOB = "fork NAME (FILE:LINE)", the first fork setting it},
--           candidates = {{knobs, string}}, rejected = {{string, reason}} }.
-- Raises one line naming the rule file and line when a rule fails, overruns its budget or returns what a rule
-- may not, when the fork product passes M.MAX_LEAVES, and when the kernel is left with no candidate.
function M.evaluate(rules, k, dev)
  local ir = require "emmy.ir"
  local res = { verdicts = {}, declared = {}, family_of = {}, declared_by = {}, set_by = {}, candidates = {}, rejected = {} }
  local fam_opts, fam_order, fam_rules = {}, {}, {}
  local ndeclared, applied = 0, 0
  for _, r in ipairs(rules) do
    if applies(r, k) then
      applied = applied + 1
      for key, def in pairs(r.knobs or {}) do
        if res.declared[key] == nil then
          ndeclared = ndeclared + 1
          if ndeclared > M.MAX_KNOBS then
            fail("%s:%d: rule %s declares %s, knob %d of kind %s; a kernel has at most %d", r.file,
              math.max(1, r.line), r.name, key, ndeclared, tostring(k.kind), M.MAX_KNOBS)
          end
          res.declared[key] = def
        end
        res.family_of[key] = res.family_of[key] or r.family
      end
      local ok, reason = true, nil
      if r.gate then ok, reason = run_gate(r, k, dev) end
      -- (a refusal cites the line of the condition that refused: refusal_line)
      res.verdicts[#res.verdicts + 1] = { rule = r.name, family = r.family, file = r.file,
        line = ok and r.line or refusal_line(r, reason), ok = ok, reason = reason or (ok and "ok" or "refused (no reason given)") }
      for key in pairs(r.knobs or {}) do
        -- a knob is refused when every rule declaring it was refused
        local prev = res.declared_by[key]
        if not prev or (not prev.ok and ok) then res.declared_by[key] = res.verdicts[#res.verdicts] end
      end
      if ok and r.fork then
        local list = run_fork(r, k, dev)
        check_options(r, list)
        if not fam_opts[r.family] then
          fam_opts[r.family] = {}
          fam_order[#fam_order + 1] = r.family
        end
        for _, o in ipairs(list) do
          local opts = fam_opts[r.family]
          opts[#opts + 1] = o
          fam_rules[o] = r
          for key in pairs(o) do
            res.set_by[key] = res.set_by[key] or ("fork %s (%s:%d)"):format(r.name, r.file, r.fork_line)
          end
        end
      end
    end
  end
  if applied == 0 then
    fail("%s (%s): no rule applies to this kind of kernel (rules folder %s)", tostring(k.name), tostring(k.kind), M.dir())
  end
  -- every knob an option sets is declared by a rule of this kernel; the product of the families stays bounded
  local product, parts = 1, {}
  for _, fam in ipairs(fam_order) do
    local opts = fam_opts[fam]
    for i, o in ipairs(opts) do
      for key in pairs(o) do
        if res.declared[key] == nil then
          local r = fam_rules[o]
          fail("%s:%d: fork %s: option %d sets %s, a knob no rule declares for kind %s (declare it in knobs = {...})",
            r.file, r.fork_line, r.name, i, key, tostring(k.kind))
        end
      end
    end
    if #opts > 0 then
      product = product * #opts
      parts[#parts + 1] = ("%s %d"):format(fam, #opts)
      if product > M.MAX_LEAVES then
        local r = fam_rules[opts[#opts]]
        fail("%s:%d: fork %s: the fork product reaches %.0f leaves (%s), over the %d a kernel may have", r.file,
          r.fork_line, r.name, product, table.concat(parts, " x "), M.MAX_LEAVES)
      end
    end
  end
  local check = M.resource_check
  local seen = {} -- a later family may override an earlier one's knob (TMA=1 sets PAD_SMEM=0): keep the first
  local keys = {} -- (every leaf's keys: the declared knobs, each option's being declared)
  for key in pairs(res.declared) do keys[#keys + 1] = key end
  table.sort(keys)
  local vkeys, code, weight = leaf_codes(fam_order, fam_opts, res.declared)
  M.each_leaf(fam_order, fam_opts, res.declared, keys, function(c)
    -- (the leaf's identity: a number from the knobs some option sets, each value's code in mixed radix; the knob
    -- string where that number could pass 2^52)
    local s, id = nil, 0
    if vkeys then
      for i = 1, #vkeys do local key = vkeys[i]; id = id + code[key][c[key]] * weight[i] end
    else
      s = M.knob_string_in(c, keys)
      id = s
    end
    if seen[id] then return end
    seen[id] = true
    local okr, why = true, nil
    if check then okr, why = check(k, c, dev) end
    if okr then
      local kn = {}
      for i = 1, #keys do local key = keys[i]; kn[key] = c[key] end
      res.candidates[#res.candidates + 1] = { knobs = kn, string = s or M.knob_string_in(c, keys) }
    else
      -- (only the first rejected leaf's knobs are read: the message when none is left)
      res.rejected[#res.rejected + 1] = { string = #res.rejected == 0 and (s or M.knob_string_in(c, keys)) or nil, reason = why }
    end
  end)
  if #res.candidates == 0 then
    local refused = {}
    for _, v in ipairs(res.verdicts) do
      if not v.ok then refused[#refused + 1] = ("%s (%s:%d): %s"):format(v.rule, v.file, v.line, v.reason) end
    end
    fail("%s (%s): the rules leave no candidate: %d rejected by the resource check (first: %s: %s)%s",
      tostring(k.name), tostring(k.kind), #res.rejected,
      res.rejected[1] and (res.rejected[1].string ~= "" and res.rejected[1].string or "no knobs") or "-",
      res.rejected[1] and tostring(res.rejected[1].reason) or "-",
      #refused > 0 and ("; refused: " .. table.concat(refused, "; ")) or "")
  end
  return res
end

-- The knob combinations a contraction's candidate may take: the legality table the emitter refuses by too
-- (src/ctr_legal.c, through knobs.ctr_refusal; a knob c leaves out is at the knob table's default), then the tiles
-- this check drops for their speed alone. Returns true, or false and why.
local function contraction_combos(k, c)
  local why = knobs.ctr_refusal(k, c)
  if why then return false, why end
  if c.MMA == 1 and (c.WM or 0) > 0 and (c.WN or 0) > 0 then
    -- the f32 accumulators each thread holds: at 256 or more ptxas spills them (1-27 KB of spill stores), the
    -- compile takes seconds, and every such tile measured 2.5-9x slower than its kernel's best (384 of the 3022
    -- timed warp-tier variants in tests/fixtures/prior/, none of them a best)
    local acc = c.WGMMA == 1 and c.BM * c.BN * (k.dual and 2 or 1) / (32 * c.WM * c.WN)
      or (c.BM / c.WM) * (c.BN / c.WN) / 32 * (k.dual and 2 or 1)
    if acc >= 256 then
      return false, ("%d f32 accumulators per thread (256 or more spill)"):format(acc)
    end
  end
  return true
end

-- A candidate's threads a block and the shared memory its kind counts against the static cap (0 where it checks its
-- own dynamic shared memory against the opt-in limit here). Returns threads, smem, or nil and why.
local function block_shape(k, c, dev)
  local threads, smem = 0, 0
  if k.kind == "contraction" and c.MMA == 1 and c.TMA == 1 then
    threads = 32 * (c.WM or 0) * (c.WN or 0)
    -- the ring, PERSIST=1's staging buffers (EPI_SMEM), its split-K peers' and WG_K=2's partial sums: the emitter's
    -- own arithmetic (knobs.ctr_smem, src/ctr_legal.c em_ctr_tma_smem), with the static mbarriers besides counted
    -- against the same per-block limit
    local dyn, bars = knobs.ctr_smem(k, c)
    smem = dyn + bars
  elseif k.kind == "contraction" and c.MMA == 1 then
    threads = 32 * (c.WM or 0) * (c.WN or 0)
    smem = 2 * (c.BM + c.BN * (k.dual and 2 or 1)) * (c.BK + (c.PAD_SMEM or 8)) * ((c.ASYNC == 1) and (c.STAGES or 1) or 1)
  elseif k.kind == "contraction" then
    if not (c.BM and c.BN and c.TM and c.TN) or c.BM % c.TM ~= 0 or c.BN % c.TN ~= 0 then
      return nil, "BM/BN are not multiples of TM/TN"
    end
    threads = (c.BM / c.TM) * (c.BN / c.TN)
    smem = 4 * c.BK * (c.BM + 1 + (c.BN + 1) * (k.dual and 2 or 1))
  elseif k.kind == "row" then
    threads = (c.THREADS or 0) * (c.RPB or 1)
    if (c.THREADS or 0) % 32 ~= 0 then return nil, "THREADS per row must be a multiple of 32" end
  elseif k.kind == "attention" and c.FLASH == 2 then
    -- a consumer warpgroup per 64 query rows and the producer's; the Q tile and the K/V ring are dynamic shared
    -- memory (opt-in), MINB blocks of it an SM
    threads = 128 * (math.floor((c.BQ or 0) / 64) * (c.KVSPLIT or 1) + 1)
    local bytes = 1024 + (c.BQ or 0) * (k.E or 0) * 2 + 2 * (c.KVST or 1) * (c.BKV or 0) * (k.E or 0) * 2
    if (c.KVSPLIT or 1) > 1 then bytes = bytes + ((k.E or 0) / 2 + 4) * 128 * 4 end -- the key parts' merge
    if c.OSMEM == 3 then bytes = bytes + (c.BQ or 0) * (k.E or 0) * 2 end -- O staged in a buffer of its own
    if bytes * (c.MINB or 1) > (dev.smem_optin or dev.smem_static) then
      return nil, ("%d B of dynamic shared memory x MINB=%d exceed %d B an SM"):format(bytes, c.MINB or 1, dev.smem_optin or dev.smem_static)
    end
    smem = 0
  elseif k.kind == "attention" and c.FLASH == 1 then
    threads = 32 * math.floor((c.BQ or 0) / 16) * (c.KVSPLIT or 1)
    -- a thread's registers: its Q fragments (D/4, unless QSMEM=1 reloads them), O's accumulators (D/2), S's (BKV/2)
    -- and P (BKV/4), and ~32 more, against what MINB blocks of these threads leave it (65536 / (threads x MINB), in
    -- 8s, at most 255): every sampled variant over it spilled, none under it did (NVRTC 13.0, 100 of Qwen3 layer
    -- 0's sdpa candidates: 9 of 33 FLASH=1 ones spilled 52-1,444 bytes; twenty-ninth session)
    local est = ((c.QSMEM == 1) and 0 or (k.E or 0) / 4) + (k.E or 0) / 2 + 3 * (c.BKV or 0) / 4 + 32
    local cap = threads > 0 and math.min(255, math.floor(65536 / (threads * (c.MINB or 1)) / 8) * 8) or 255
    if est > cap then
      return nil, ("about %d registers a thread; %d threads x MINB=%d leave %d"):format(est, threads, c.MINB or 1, cap)
    end
    local q, kv = c.BQ or 0, 2 * (c.BKV or 0) * (c.KVST or 1) * (c.KVSPLIT or 1)
    smem = (c.QSMEM == 1 and q + kv or math.max(q, kv)) * ((k.E or 0) + 8) * 2
    if (c.KVSPLIT or 1) > 1 then
      smem = math.max(smem, math.floor((c.BQ or 0) / 16) * 32 * ((k.E or 0) / 2 + 4) * 4) -- the states' merge
      -- dynamic shared memory (opt-in): checked here, the static cap below does not apply
      if smem > (dev.smem_optin or dev.smem_static) then
        return nil, ("%d B of dynamic shared memory exceed %d B per block"):format(smem, dev.smem_optin or dev.smem_static)
      end
      smem = 0
    end
  elseif k.kind == "attention" then
    threads = c.QROWS or 0
    smem = 4 * (c.KV_TILE or 0) * ((k.E or 0) + (k.Ev or 0))
    local regs = math.min(255, (k.E or 0) + (k.Ev or 0) + 40)
    if regs * threads > dev.regs_per_block then
      return nil, ("about %d registers x %d threads exceed %d per block"):format(regs, threads, dev.regs_per_block)
    end
  else
    threads = c.BLOCK or 0
  end
  return threads, smem
end

-- The engine's resource check of one candidate (threads per block, static shared memory, an estimate of
-- registers), before anything is compiled. Returns ok, reason.
function M.resource_check(k, c, dev)
  if k.kind == "contraction" then
    local ok, why = contraction_combos(k, c)
    if not ok then return false, why end
  end
  local threads, smem = block_shape(k, c, dev)
  if not threads then return false, smem end
  if threads < 32 or threads > dev.max_threads or threads % 32 ~= 0 then
    return false, ("%d threads per block (must be a multiple of 32 in 32..%d)"):format(threads, dev.max_threads)
  end
  -- the cp.async ring of the warp tier is dynamic shared memory: up to the opt-in limit per block; so is the
  -- staged result tile of a RoPE epilogue (BM x (BN + 8) elements per accumulator; over the ring when there is one)
  local staged = k.kind == "contraction" and k.stage and c.BM and c.BN
  if staged then
    local st = 2 * c.BM * (c.BN + 8) * (k.dual and 2 or 1)
    smem = (c.MMA == 1 and c.ASYNC == 1) and math.max(smem, st) or smem + st
  end
  local dyn = k.kind == "contraction" and ((c.MMA == 1 and c.ASYNC == 1) or staged)
  local cap = dyn and (dev.smem_optin or dev.smem_static) or dev.smem_static
  if smem > cap then
    return false, ("%d B of %s shared memory exceed %d B per block"):format(smem, dyn and "dynamic" or "static", cap)
  end
  return true
end

-- The items of EMMY_KNOBS ("K=V,kname:K=V"): {{item = text, who = kname substring | nil, key, v}, ...}. An item
-- that is not K=V or KERNEL:K=V, whose knob is not in the knob table, or that pins a structural knob for one
-- kernel raises one line.
function M.knob_items(env)
  env = env or os.getenv
  local out = {}
  local spec = env("EMMY_KNOBS")
  if spec and spec ~= "" then
    for item in spec:gmatch("[^,]+") do
      local who, key, v = item:match("^%s*([%w_]+):([%w_]+)=(%-?%d+)%s*$")
      if not who then key, v = item:match("^%s*([%w_]+)=(%-?%d+)%s*$") end
      if not key then usage("EMMY_KNOBS item '%s' needs K=V or KERNEL:K=V", item) end
      if not knobs.info(key) then usage("EMMY_KNOBS item '%s': %s", item, select(2, knobs.check(key, 0))) end
      if who and require("emmy.compiler").STRUCTURAL[key] ~= nil then
        usage("EMMY_KNOBS item '%s': %s is structural, pinned for the whole run (%s=%s, without a KERNEL: prefix)",
          item, key, key, v)
      end
      out[#out + 1] = { item = item:match("^%s*(.-)%s*$"), who = who, key = key, v = tonumber(v) }
    end
  end
  return out
end

-- Pins for kernel kname from EMMY_KNOBS ("K=V,kname:K=V") and EMMY_<KNOB>=V for declared knobs.
function M.pins(kname, declared, env)
  env = env or os.getenv
  local pins = {}
  for _, it in ipairs(M.knob_items(env)) do
    if not it.who or kname:find(it.who, 1, true) then pins[it.key] = it.v end
  end
  for key in pairs(declared) do
    local v = env("EMMY_" .. key)
    if v and v ~= "" then
      if not tonumber(v) then error(("EMMY_%s=%s needs an integer"):format(key, v), 0) end
      pins[key] = tonumber(v)
    end
  end
  return pins
end

-- Checks the environment's pins against the plans of a whole run (every kernel's {kernel, eval}; the plans of
-- every structural fork the run forms): an EMMY_KNOBS item whose knob no kernel of the run declares (no kernel
-- whose name contains its KERNEL, for KERNEL:K=V), or an EMMY_<KNOB> variable of a knob no kernel declares, raises
-- one line — such a pin would change nothing. The structural knobs (compiler.STRUCTURAL) pin the kernel former.
function M.check_pins(plans, env)
  env = env or os.getenv
  local structural = require("emmy.compiler").STRUCTURAL
  local function has(key, who)
    for _, p in ipairs(plans) do
      if (not who or p.kernel.name:find(who, 1, true)) and p.eval.declared[key] ~= nil then return true end
    end
    return false
  end
  for _, it in ipairs(M.knob_items(env)) do
    if not structural[it.key] and not has(it.key, it.who) then
      if it.who then
        local named = false
        for _, p in ipairs(plans) do if p.kernel.name:find(it.who, 1, true) then named = true break end end
        if not named then
          usage("EMMY_KNOBS item '%s': no kernel of this run has '%s' in its name", it.item, it.who)
        end
      end
      usage("EMMY_KNOBS item '%s': no kernel of this run%s has the knob %s (it belongs to: %s)", it.item,
        it.who and (" named *" .. it.who .. "*") or "", it.key, knobs.info(it.key).kinds)
    end
  end
  for _, info in ipairs(knobs.list()) do
    local v = env("EMMY_" .. info.name)
    if v and v ~= "" and not structural[info.name] and not has(info.name) then
      usage("EMMY_%s=%s: no kernel of this run has the knob %s (it belongs to: %s)", info.name, v, info.name, info.kinds)
    end
  end
end

-- Filters candidates by pins; a pin a gate refused, or one no candidate has, is an error naming why.
function M.apply_pins(kname, res, pins)
  -- structural knobs were applied when the kernels were formed
  for key in pairs(require("emmy.compiler").STRUCTURAL) do pins[key] = nil end
  if next(pins) == nil then return res.candidates end
  local out = {}
  for _, c in ipairs(res.candidates) do
    local ok = true
    for key, v in pairs(pins) do
      if res.declared[key] ~= nil and c.knobs[key] ~= v then ok = false end
    end
    if ok then out[#out + 1] = c end
  end
  if #out == 0 then
    for key, v in pairs(pins) do
      if res.declared[key] ~= nil then
        local vd = res.declared_by[key]
        if vd and not vd.ok then
          error(("%s: pin %s=%d is refused by gate %s (%s:%d): %s"):format(kname, key, v, vd.rule, vd.file, vd.line,
            vd.reason), 0)
        end
        local vals, seen = {}, {}
        for _, c in ipairs(res.candidates) do
          local x = c.knobs[key]
          if not seen[x] then seen[x] = true vals[#vals + 1] = tostring(x) end
        end
        -- (a pin some candidate has is not the culprit alone: the pins exclude each other)
        if not seen[v] then
          error(("%s: pin %s=%d matches no candidate (%s takes %s)"):format(kname, key, v, key, table.concat(vals, ", ")), 0)
        end
      end
    end
    local ps = {}
    for key, v in pairs(pins) do if res.declared[key] ~= nil then ps[#ps + 1] = key .. "=" .. v end end
    table.sort(ps)
    error(("%s: the pins %s match no candidate together (each alone does)"):format(kname, table.concat(ps, ",")), 0)
  end
  return out
end

return M
