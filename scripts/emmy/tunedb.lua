-- emmy/tunedb.lua — the tune DB (SQLite, WAL): every measurement a tune makes, failures included, keyed by the
-- measuring context (GPU, driver, NVRTC, regime) so rows of different regimes are never mixed. One transaction
-- per measured variant: killing a tune loses at most the variant in flight. Schema: docs/formats.md ("The tune
-- DB"). The file is emmy's own: PRAGMA application_id says so and PRAGMA user_version gives the schema; both
-- are checked on a read-only connection before anything is written (the journal mode included), so a foreign
-- file or another version is refused untouched. A tune holds the run lock (emmy.sqlite db:lock) shared while it
-- writes; --clean takes it exclusively, so it cannot delete the rows of a tune that is running. Parameters are
-- always bound (emmy.sqlite), never formatted into SQL.
local sqlite = require "emmy.sqlite"
local cjson = require "cjson"

local M = {}
M.SCHEMA = 2
M.APP_ID = 0x656d6d79 -- "emmy"
-- Schema 1 (emmy 0.1.0 before the application_id) has the tables of schema 2 and application_id 0: a read-write
-- open stamps it as schema 2 in one transaction (rows untouched); a read-only open reads it as it is.
M.LEGACY = 1
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

-- The columns of each table, in order (what tells a schema 1 file of emmy's from another program's).
local COLUMNS = {
  runs = "id command git_rev dirty started ended",
  contexts = "id gpu cc driver nvrtc regime",
  kernels = "hash name ops features flops bytes",
  variants = "id kernel_hash knobs tier families",
  measurements = "id run_id context_id variant_id status error median_us min_us p20_us p80_us samples regs spills " ..
    "smem compile_ms prior_offline prior_online search_order created",
}

local DB = {}
DB.__index = DB

local function now() return os.time() end

-- The default path: $EMMY_TUNE_DB, else ~/.cache/emmy/tune.db.
function M.default_path()
  local p = os.getenv("EMMY_TUNE_DB")
  if p and p ~= "" then return p end
  return (os.getenv("HOME") or ".") .. "/.cache/emmy/tune.db"
end

-- What the file at path holds, read on h (a connection that writes nothing): {app_id, version, tables = sorted
-- list, emmy = the five tables with emmy's columns} | nil, msg.
local function inspect(h)
  local a, err = h:rows("PRAGMA application_id")
  if not a then return nil, err end
  local v = assert(h:rows("PRAGMA user_version"))
  local info = { app_id = a[1].application_id, version = v[1].user_version, tables = {} }
  for _, r in ipairs(assert(h:rows("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"))) do
    info.tables[#info.tables + 1] = r.name
  end
  local n, same = 0, true
  for name, cols in pairs(COLUMNS) do
    n = n + 1
    local got = {}
    for _, c in ipairs(assert(h:rows("SELECT name FROM pragma_table_info(?) ORDER BY cid", name))) do got[#got + 1] = c.name end
    if table.concat(got, " ") ~= cols then same = false end
  end
  info.emmy = same and #info.tables == n
  return info
end

-- Why the file described by info is not a tune DB this emmy may use, or nil. (A file with no table and no
-- application_id or version is an empty SQLite file: it becomes a tune DB.)
local function refusal(info, readonly)
  if info.app_id == M.APP_ID then
    if info.version == M.SCHEMA then return nil end
    if info.version > M.SCHEMA then
      return ("has schema version %d, written by a newer emmy (this one reads %d)"):format(info.version, M.SCHEMA)
    end
    return ("has schema version %d, which this emmy does not read (it reads %d)"):format(info.version, M.SCHEMA)
  end
  if info.app_id == 0 and info.version == M.LEGACY and info.emmy then return nil end
  if info.app_id == 0 and info.version == 0 and #info.tables == 0 then
    if not readonly then return nil end
    return "is an empty SQLite file, not a tune DB yet (run emmy tune first)"
  end
  local what = #info.tables > 0 and ("tables: " .. table.concat(info.tables, ", ", 1, math.min(#info.tables, 6)) ..
    (#info.tables > 6 and ", …" or "")) or "no tables"
  return ("is a SQLite database of another program (application_id %d, user_version %d, %s), not a tune DB"):format(
    info.app_id, info.version, what)
end

-- Opens the tune DB at path. Returns db | nil, msg (one line naming the path; the file as it was).
-- An existing file is first inspected on an immutable read-only connection (no lock, no -wal or -shm made) and
-- refused untouched unless it is this emmy's tune DB (or an empty SQLite file, or schema 1).
--   Read-write (the default): creates the folder, the file and the schema when absent, stamps schema 1 as schema
--   2 (rows untouched), checking again under the write lock; only then is the journal switched to WAL.
--   opts.readonly: nothing is ever written (SQLite's read-only mode and PRAGMA query_only); the file must exist.
--   SQLite may leave its empty -wal and -shm files beside the DB. Where the folder cannot be written (a
--   read-only mount) and no -wal exists, the file is all there is: it is opened immutable.
function M.open(path, opts)
  opts = opts or {}
  path = path or M.default_path()
  local sys = require "emmy.sys"
  local ro = opts.readonly
  local function refuse(msg) return nil, ("tune DB %s %s; left as it is%s"):format(path, msg,
    ro and "" or " (give EMMY_TUNE_DB another path)") end
  local kind, ready = sys.stat(path), false
  if kind and kind ~= "file" then return refuse(kind == "dir" and "is a folder" or "is not a regular file") end
  if not kind and ro then return nil, ("no tune DB at %s (run emmy tune first, or give --db PATH)"):format(path) end
  if kind then
    -- inspected on an immutable read-only connection: no lock, no -wal or -shm file made, nothing written
    local h, err = sqlite.open(path, { readonly = true, immutable = true })
    if not h then return nil, ("tune DB %s: %s"):format(path, err) end
    local info, ierr = inspect(h)
    h:close()
    if not info then
      if tostring(ierr):find("file is not a database", 1, true) then return refuse("is not a SQLite database") end
      return nil, ("tune DB %s: cannot read it (%s); left as it is%s"):format(path, tostring(ierr),
        ro and "" or " (move it away, or give EMMY_TUNE_DB another path)")
    end
    local why = refusal(info, ro)
    if why then return refuse(why) end
    if ro then
      -- reads see a running tune's rows (through its -wal); on media nobody can write, the file is all there is
      h, err = sqlite.open(path, { readonly = true })
      local okr = h and h:rows("PRAGMA user_version")
      if not okr and not sys.writable(path:match("^(.*)/[^/]*$") or ".") and not sys.stat(path .. "-wal") then
        if h then h:close() end
        h, err = sqlite.open(path, { readonly = true, immutable = true })
        okr = h and h:rows("PRAGMA user_version")
      end
      if not okr then
        if h then h:close() end
        return nil, ("tune DB %s: cannot read it: %s"):format(path, tostring(err or "unknown error"))
      end
      return setmetatable({ h = h, path = path, readonly = true, version = info.version }, DB)
    end
    ready = info.app_id == M.APP_ID -- (and at this version: nothing to create or stamp)
  end
  local dir = path:match("^(.*)/[^/]*$")
  if dir and dir ~= "" then
    local ok, err = sys.mkdir_p(dir)
    if not ok then return nil, ("tune DB %s: %s"):format(path, tostring(err)) end
  end
  local h, err = sqlite.open(path)
  if not h then return nil, ("tune DB %s: %s"):format(path, err) end
  local function fail(msg)
    h:close()
    return nil, ("tune DB %s: %s"):format(path, msg)
  end
  -- create or stamp under the write lock, checking again there (another emmy may have been first)
  local ok, e2 = h:exec(ready and "BEGIN" or "BEGIN IMMEDIATE")
  if not ok then return fail(e2) end
  local info, ierr = inspect(h)
  if not info then
    h:exec("ROLLBACK")
    return fail(ierr)
  end
  local why = refusal(info, false)
  if why then
    h:exec("ROLLBACK")
    h:close()
    return refuse(why)
  end
  local stamp = ("PRAGMA application_id = %d; PRAGMA user_version = %d; COMMIT"):format(M.APP_ID, M.SCHEMA)
  if info.app_id == M.APP_ID then stamp = "COMMIT"
  elseif info.emmy then -- schema 1: the same tables
  else stamp = SCHEMA_SQL .. stamp end
  ok, e2 = h:exec(stamp)
  if not ok then
    h:exec("ROLLBACK")
    return fail(e2)
  end
  local mode = h:rows("PRAGMA journal_mode = WAL")
  if not mode or not mode[1] or mode[1].journal_mode ~= "wal" then return fail("cannot switch to WAL journaling") end
  ok, e2 = h:exec("PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL")
  if not ok then return fail(e2) end
  return setmetatable({ h = h, path = path }, DB)
end

-- Opens the tune DB for a run that writes measurements (emmy tune) and takes the run lock: shared, held until
-- db:close() (or the process's end), so that no --clean deletes rows under the run. o.clean: first take the lock
-- exclusively — at once or never: another run holding it is an error — delete every row (one transaction), call
-- o.on_clean() (the tune removes the online half and the cubin cache there), then hold it shared.
-- o.wait_ms: how long to wait for a --clean of another run to finish (default 60000). Returns db | nil, msg.
function M.open_for_run(path, o)
  o = o or {}
  path = path or M.default_path()
  local db, err = M.open(path)
  if not db then return nil, err end
  local function fail(msg)
    db:close()
    return nil, ("tune DB %s: %s"):format(path, msg)
  end
  if o.clean then
    local ok, lerr = db.h:lock("exclusive", 0)
    if not ok then
      if lerr ~= "busy" then return fail(lerr) end
      return fail("another tune is writing to it, and --clean would delete its rows; nothing was deleted " ..
        "(let that tune finish, or give this one another EMMY_TUNE_DB)")
    end
    local okw, werr = db.h:exec([[BEGIN IMMEDIATE; DELETE FROM measurements; DELETE FROM variants; DELETE FROM kernels;
      DELETE FROM contexts; DELETE FROM runs; COMMIT]])
    if not okw then
      db.h:exec("ROLLBACK")
      return fail(werr)
    end
    if o.on_clean then o.on_clean() end
  end
  local ok, lerr = db.h:lock("shared", o.clean and 0 or (o.wait_ms or 60000))
  if not ok then
    if lerr ~= "busy" then return fail(lerr) end
    return fail(("a --clean of another tune has held it for %.0f s; try again when it is done"):format((o.wait_ms or 60000) / 1e3))
  end
  return db
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

-- The contexts (GPU, driver, NVRTC, regime) that have measurements: {{id =, gpu =, cc =, driver =, nvrtc =, regime =}, ...}.
function DB:contexts()
  return assert(self.h:rows([[SELECT c.id, c.gpu, c.cc, c.driver, c.nvrtc, c.regime FROM contexts c
    WHERE EXISTS (SELECT 1 FROM measurements m WHERE m.context_id = c.id) ORDER BY c.id]]))
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

-- ---- merging tune DBs (`emmy db merge`, issue 24) --------------------------------------------------------

-- Where a DB's rows were measured: its contexts' distinct "gpu | driver | nvrtc" (cc follows the GPU; regimes may
-- differ within one machine's rows).
local function provenances(db)
  local out = {}
  for _, r in ipairs(assert(db.h:rows("SELECT DISTINCT gpu, driver, nvrtc FROM contexts ORDER BY gpu, driver, nvrtc"))) do
    out[#out + 1] = ("%s | driver %s | NVRTC %s"):format(r.gpu, r.driver, r.nvrtc)
  end
  return out
end

local MEAS_COLS = { "status", "error", "median_us", "min_us", "p20_us", "p80_us", "samples", "regs", "spills", "smem",
  "compile_ms", "prior_offline", "prior_online", "search_order", "created" }

-- Copies one input DB's rows into out (inside the caller's transaction), each row once: runs by (command, git_rev,
-- dirty, started, ended), contexts and variants by their unique keys, kernels by hash (the first description
-- kept), measurements by every column with the run, context and variant mapped. Returns the rows added by table.
local function merge_one(out, src, budget)
  local h, added = out.h, { runs = 0, contexts = 0, kernels = 0, variants = 0, measurements = 0 }
  local run_of, ctx_of, var_of = {}, {}, {}
  -- (inserts the row where the lookup finds none, and counts it)
  local function ensure(t, lookup, largs, insert, iargs)
    local have = assert(h:rows(lookup, unpack(largs)))[1]
    if have then return have end
    assert(h:run(insert, unpack(iargs, 1, iargs.n or #iargs)))
    added[t] = added[t] + 1
    return assert(h:rows(lookup, unpack(largs)))[1]
  end
  for _, r in ipairs(assert(src.h:rows("SELECT * FROM runs ORDER BY id"))) do
    local key = "SELECT id FROM runs WHERE command = ? AND git_rev IS ? AND dirty = ? AND started = ? AND ended IS ?"
    local have = assert(h:rows(key, r.command, r.git_rev, r.dirty, r.started, r.ended))[1]
    if not have then
      assert(h:run("INSERT INTO runs (command, git_rev, dirty, started, ended) VALUES (?, ?, ?, ?, ?)", r.command, r.git_rev,
        r.dirty, r.started, r.ended))
      added.runs = added.runs + 1
      run_of[r.id] = h:last_id()
    else
      run_of[r.id] = have.id
    end
  end
  for _, c in ipairs(assert(src.h:rows("SELECT * FROM contexts ORDER BY id"))) do
    local key = { c.gpu, c.cc, c.driver, c.nvrtc, c.regime }
    ctx_of[c.id] = ensure("contexts", "SELECT id FROM contexts WHERE gpu = ? AND cc = ? AND driver = ? AND nvrtc = ? AND regime = ?",
      key, "INSERT INTO contexts (gpu, cc, driver, nvrtc, regime) VALUES (?, ?, ?, ?, ?)", key).id
  end
  for _, k in ipairs(assert(src.h:rows("SELECT * FROM kernels ORDER BY hash"))) do
    ensure("kernels", "SELECT hash FROM kernels WHERE hash = ?", { k.hash },
      "INSERT INTO kernels (hash, name, ops, features, flops, bytes) VALUES (?, ?, ?, ?, ?, ?)",
      { k.hash, k.name, k.ops, k.features, k.flops, k.bytes, n = 6 })
  end
  for _, v in ipairs(assert(src.h:rows("SELECT * FROM variants ORDER BY id"))) do
    var_of[v.id] = ensure("variants", "SELECT id FROM variants WHERE kernel_hash = ? AND knobs = ?", { v.kernel_hash, v.knobs },
      "INSERT INTO variants (kernel_hash, knobs, tier, families) VALUES (?, ?, ?, ?)",
      { v.kernel_hash, v.knobs, v.tier, v.families, n = 4 }).id
  end
  local where, ins = { "run_id IS ?", "context_id = ?", "variant_id = ?" }, { "run_id", "context_id", "variant_id" }
  for _, c in ipairs(MEAS_COLS) do where[#where + 1] = c .. " IS ?"; ins[#ins + 1] = c end
  local q = "SELECT id FROM measurements WHERE " .. table.concat(where, " AND ") .. " LIMIT 1"
  local marks = {}
  for i = 1, #ins do marks[i] = "?" end
  local put = ("INSERT INTO measurements (%s) VALUES (%s)"):format(table.concat(ins, ", "), table.concat(marks, ", "))
  for _, m in ipairs(assert(src.h:rows("SELECT * FROM measurements ORDER BY id"))) do
    local vals = { m.run_id and run_of[m.run_id] or nil, ctx_of[m.context_id], var_of[m.variant_id] }
    for i, c in ipairs(MEAS_COLS) do vals[3 + i] = m[c] end
    if not assert(h:rows(q, unpack(vals, 1, #ins)))[1] then
      if budget.left then
        budget.left = budget.left - 1
        if budget.left < 0 then error("merge interrupted (EMMY_DB_MERGE_FAIL_AFTER)", 0) end
      end
      assert(h:run(put, unpack(vals, 1, #ins)))
      added.measurements = added.measurements + 1
    end
  end
  return added
end

-- Merges the tune DBs at inputs into the one at out (created where missing), in one transaction: all of it or
-- nothing (a merge killed or failing midway leaves out as it was). Merging the same rows again adds nothing. DBs
-- measured on another GPU, driver or NVRTC than the others (out's rows included) are refused unless opts.force.
-- Returns {per input: {path, runs, contexts, kernels, variants, measurements}}, or nil, msg, code (2: refused).
function M.merge(out_path, inputs, opts)
  opts = opts or {}
  local srcs = {}
  local function close_all() for _, s in ipairs(srcs) do s.db:close() end end
  for _, p in ipairs(inputs) do
    local db, err = M.open(p, { readonly = true })
    if not db then close_all(); return nil, err, 2 end
    srcs[#srcs + 1] = { path = p, db = db }
  end
  local out, err = M.open(out_path)
  if not out then close_all(); return nil, err, 2 end
  local seen, first = {}, nil
  local function note(path, db)
    for _, pv in ipairs(provenances(db)) do
      if not seen[pv] then seen[pv] = path; first = first or pv end
    end
  end
  note(out_path, out)
  for _, s in ipairs(srcs) do note(s.path, s.db) end
  local kinds = {}
  for pv, path in pairs(seen) do kinds[#kinds + 1] = ("%s (%s)"):format(pv, path) end
  table.sort(kinds)
  if #kinds > 1 and not opts.force then
    close_all(); out:close()
    return nil, ("the DBs were measured on different machines: %s; nothing merged (--force merges them anyway)"):format(
      table.concat(kinds, "; ")), 2
  end
  local budget = { left = tonumber(os.getenv("EMMY_DB_MERGE_FAIL_AFTER") or "") }
  assert(out.h:exec("BEGIN IMMEDIATE"))
  local ok, res = pcall(function()
    local r = {}
    for _, s in ipairs(srcs) do
      local a = merge_one(out, s.db, budget)
      a.path = s.path
      r[#r + 1] = a
    end
    return r
  end)
  if not ok then
    out.h:exec("ROLLBACK")
    close_all(); out:close()
    return nil, ("%s; %s is as it was"):format(tostring(res), out_path), 1
  end
  assert(out.h:exec("COMMIT"))
  close_all(); out:close()
  return res
end

return M
