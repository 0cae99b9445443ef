-- emmy/tunedb.lua — the tune DB (SQLite, WAL): every measurement a tune makes, failures included, keyed by the
-- measuring context (GPU, driver, NVRTC, regime) so rows of different regimes are never mixed. One transaction
-- per measured variant: killing a tune loses at most the variant in flight. Schema: docs/formats.md ("The tune
-- DB"); its version is PRAGMA user_version. Parameters are always bound (emmy.sqlite), never formatted into SQL.
local sqlite = require "emmy.sqlite"
local cjson = require "cjson"

local M = {}
M.SCHEMA = 1
-- the statuses a measurement row may carry (DESIGN.md: failures are data)
M.STATUS = { ok = true, compile_fail = true, emit_fail = true, load_fail = true, launch_fail = true, timeout = true,
  wrong = true, resource = true }

local SCHEMA_SQL = [[
CREATE TABLE runs (
  id INTEGER PRIMARY KEY, command TEXT NOT NULL, git_rev TEXT, dirty INTEGER NOT NULL DEFAULT 0,
  started REAL NOT NULL, ended REAL);
CREATE TABLE contexts (
  id INTEGER PRIMARY KEY, gpu TEXT NOT NULL, cc TEXT NOT NULL, driver TEXT NOT NULL, nvrtc TEXT NOT NULL,
  regime TEXT NOT NULL, UNIQUE (gpu, cc, driver, nvrtc, regime));
CREATE TABLE kernels (
  hash TEXT PRIMARY KEY, name TEXT NOT NULL, ops TEXT, features TEXT, flops REAL, bytes REAL);
CREATE TABLE variants (
  id INTEGER PRIMARY KEY, kernel_hash TEXT NOT NULL REFERENCES kernels (hash), knobs TEXT NOT NULL, tier TEXT,
  families TEXT, UNIQUE (kernel_hash, knobs));
CREATE TABLE measurements (
  id INTEGER PRIMARY KEY, run_id INTEGER REFERENCES runs (id), context_id INTEGER NOT NULL REFERENCES contexts (id),
  variant_id INTEGER NOT NULL REFERENCES variants (id), status TEXT NOT NULL, error TEXT,
  median_us REAL, min_us REAL, p20_us REAL, p80_us REAL, samples INTEGER,
  regs INTEGER, spills INTEGER, smem INTEGER, compile_ms REAL,
  prior_offline REAL, prior_online REAL, search_order INTEGER, created REAL NOT NULL);
CREATE INDEX measurements_by_variant ON measurements (context_id, variant_id);
]]

local DB = {}
DB.__index = DB

local function now() return os.time() end

-- The default path: $EMMY_TUNE_DB, else ~/.cache/emmy/tune.db.
function M.default_path()
  local p = os.getenv("EMMY_TUNE_DB")
  if p and p ~= "" then return p end
  return (os.getenv("HOME") or ".") .. "/.cache/emmy/tune.db"
end

-- Opens (creating the file, its folder and the schema) the tune DB at path. Returns db | nil, msg.
function M.open(path)
  path = path or M.default_path()
  local dir = path:match("^(.*)/[^/]*$")
  if dir and dir ~= "" then
    local ok, err = require("emmy.sys").mkdir_p(dir)
    if not ok then return nil, ("tune DB %s: %s"):format(path, tostring(err)) end
  end
  local h, err = sqlite.open(path)
  if not h then return nil, ("tune DB %s: %s"):format(path, err) end
  local function fail(msg)
    h:close()
    return nil, ("tune DB %s: %s"):format(path, msg)
  end
  local mode = h:rows("PRAGMA journal_mode = WAL")
  if not mode or not mode[1] or mode[1].journal_mode ~= "wal" then return fail("cannot switch to WAL journaling") end
  local ok, e2 = h:exec("PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL")
  if not ok then return fail(e2) end
  local v = assert(h:rows("PRAGMA user_version"))[1].user_version
  if v == 0 then
    ok, e2 = h:exec("BEGIN IMMEDIATE; " .. SCHEMA_SQL .. ("PRAGMA user_version = %d; COMMIT"):format(M.SCHEMA))
    if not ok then
      h:exec("ROLLBACK")
      return fail(e2)
    end
  elseif v > M.SCHEMA then
    return fail(("schema version %d was written by a newer emmy (this one reads %d)"):format(v, M.SCHEMA))
  end
  return setmetatable({ h = h, path = path }, DB)
end

function DB:close() self.h:close() end

local function need(x, what)
  if x == nil then error(("tunedb: %s is required"):format(what), 3) end
  return x
end

-- A run of a command (tune, bench): its id. dirty: the working tree had uncommitted changes.
function DB:begin_run(command, git_rev, dirty)
  assert(self.h:run("INSERT INTO runs (command, git_rev, dirty, started) VALUES (?, ?, ?, ?)", need(command, "command"),
    git_rev, dirty and 1 or 0, now()))
  return self.h:last_id()
end

function DB:end_run(id) assert(self.h:run("UPDATE runs SET ended = ? WHERE id = ?", now(), id)) end

-- The id of a measuring context {gpu, cc, driver, nvrtc, regime}, created on first use.
function DB:context(c)
  local args = { need(c.gpu, "gpu"), need(c.cc, "cc"), tostring(need(c.driver, "driver")), tostring(need(c.nvrtc, "nvrtc")),
    need(c.regime, "regime") }
  assert(self.h:run("INSERT OR IGNORE INTO contexts (gpu, cc, driver, nvrtc, regime) VALUES (?, ?, ?, ?, ?)", unpack(args)))
  return assert(self.h:rows("SELECT id FROM contexts WHERE gpu = ? AND cc = ? AND driver = ? AND nvrtc = ? AND regime = ?",
    unpack(args)))[1].id
end

-- Records a kernel by structural hash {hash, name, ops, features (table), flops, bytes}; later calls update it.
function DB:kernel(k)
  assert(self.h:run([[INSERT INTO kernels (hash, name, ops, features, flops, bytes) VALUES (?, ?, ?, ?, ?, ?)
    ON CONFLICT (hash) DO UPDATE SET name = excluded.name, ops = excluded.ops, features = excluded.features,
    flops = excluded.flops, bytes = excluded.bytes]], need(k.hash, "hash"), need(k.name, "name"), k.ops,
    k.features and cjson.encode(k.features) or nil, k.flops, k.bytes))
end

-- The id of a variant (kernel hash, canonical knob string), created on first use.
function DB:variant(hash, knobs, tier, families)
  assert(self.h:run("INSERT OR IGNORE INTO variants (kernel_hash, knobs, tier, families) VALUES (?, ?, ?, ?)",
    need(hash, "kernel hash"), need(knobs, "knobs"), tier, families and cjson.encode(families) or nil))
  return assert(self.h:rows("SELECT id FROM variants WHERE kernel_hash = ? AND knobs = ?", hash, knobs))[1].id
end

local MCOLS = { "run_id", "context_id", "variant_id", "status", "error", "median_us", "min_us", "p20_us", "p80_us",
  "samples", "regs", "spills", "smem", "compile_ms", "prior_offline", "prior_online", "search_order" }

-- Records one measurement (one transaction). m: {run_id, context_id, variant_id, status, error, median_us, min_us,
-- p20_us, p80_us, samples, regs, spills, smem, compile_ms, prior_offline, prior_online, search_order}.
function DB:record(m)
  if not M.STATUS[m.status] then
    local known = {}
    for s in pairs(M.STATUS) do known[#known + 1] = s end
    table.sort(known)
    error(("tunedb: status %s is not one of %s"):format(tostring(m.status), table.concat(known, ", ")), 2)
  end
  need(m.context_id, "context_id")
  need(m.variant_id, "variant_id")
  local vals, marks = {}, {}
  for i, col in ipairs(MCOLS) do
    vals[i] = m[col]
    marks[i] = "?"
  end
  vals[#MCOLS + 1] = now() -- (vals has holes: index explicitly)
  assert(self.h:exec("BEGIN IMMEDIATE"))
  local ok, err = self.h:run(("INSERT INTO measurements (%s, created) VALUES (%s, ?)"):format(table.concat(MCOLS, ", "),
    table.concat(marks, ", ")), unpack(vals, 1, #MCOLS + 1))
  if not ok then
    self.h:exec("ROLLBACK")
    error("tunedb: " .. err, 2)
  end
  assert(self.h:exec("COMMIT"))
  return self.h:last_id()
end

-- The latest measurement of a variant in a context (a tune serves it from here instead of the GPU), or nil.
function DB:measured(context_id, variant_id)
  return assert(self.h:rows("SELECT * FROM measurements WHERE context_id = ? AND variant_id = ? ORDER BY id DESC LIMIT 1",
    context_id, variant_id))[1]
end

-- The fastest ok measurement of a kernel in a context, with its knob string and tier, or nil.
function DB:best(context_id, hash)
  return assert(self.h:rows([[SELECT m.*, v.knobs, v.tier FROM measurements m JOIN variants v ON v.id = m.variant_id
    WHERE m.context_id = ? AND v.kernel_hash = ? AND m.status = 'ok' ORDER BY m.median_us ASC, m.id ASC LIMIT 1]],
    context_id, hash))[1]
end

-- Every ok row of a context with what the online half fits on: {kind, knobs (string), us, offline, hash, facts
-- (the kernel's features JSON)}.
function DB:fit_rows(context_id)
  return assert(self.h:rows([[SELECT k.ops AS kind, v.knobs AS knobs, m.median_us AS us, m.prior_offline AS offline,
    v.kernel_hash AS hash, k.features AS facts
    FROM measurements m JOIN variants v ON v.id = m.variant_id JOIN kernels k ON k.hash = v.kernel_hash
    WHERE m.context_id = ? AND m.status = 'ok' AND m.median_us IS NOT NULL AND m.prior_offline IS NOT NULL]], context_id))
end

-- Counts of the measurements a run recorded, by status: {ok = n, wrong = n, ...}, and their total.
function DB:run_counts(run_id)
  local out, n = {}, 0
  for _, r in ipairs(assert(self.h:rows("SELECT status, COUNT(*) AS n FROM measurements WHERE run_id = ? GROUP BY status",
    run_id))) do
    out[r.status], n = r.n, n + r.n
  end
  return out, n
end

-- The rows of a run that are not ok, oldest first: {{kernel = name, knobs =, status =, error =}, ...}.
function DB:run_failures(run_id)
  return assert(self.h:rows([[SELECT k.name AS kernel, v.knobs, m.status, m.error FROM measurements m
    JOIN variants v ON v.id = m.variant_id JOIN kernels k ON k.hash = v.kernel_hash
    WHERE m.run_id = ? AND m.status <> 'ok' ORDER BY m.id]], run_id))
end

-- Counts of a kernel's measurements in a context by status: {ok = n, wrong = n, ...}.
function DB:status_counts(context_id, hash)
  local out = {}
  for _, r in ipairs(assert(self.h:rows([[SELECT m.status, COUNT(*) AS n FROM measurements m JOIN variants v ON v.id = m.variant_id
    WHERE m.context_id = ? AND v.kernel_hash = ? GROUP BY m.status]], context_id, hash))) do out[r.status] = r.n end
  return out
end

return M
