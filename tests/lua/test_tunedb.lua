-- The tune DB (emmy.tunedb over emmy.sqlite): schema and WAL on open, runs/contexts/kernels/variants/measurements,
-- one transaction per measurement, rows that outlive the process (a killed tune resumes), parameters bound
-- (quotes in knob strings and errors), statuses checked, a newer schema refused, a process killed mid-tune.
local sqlite = require "emmy.sqlite"
local tunedb = require "emmy.tunedb"

local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end

local CTX = { gpu = "NVIDIA H200", cc = "9.0", driver = "580.159", nvrtc = "13.0", regime = "deploy" }

test("sqlite: bound parameters, rows, one statement per call, errors as nil, msg", function()
  local db = assert(sqlite.open(tmpdir() .. "/s.db"))
  assert(db:exec("CREATE TABLE t (a INTEGER, b TEXT, c REAL)"))
  eq(db:run("INSERT INTO t VALUES (?, ?, ?)", 1, "it's \"quoted\"; DROP TABLE t", 2.5), 1, "one row")
  assert(db:run("INSERT INTO t VALUES (?, ?, ?)", 2, nil, nil))
  local rows = assert(db:rows("SELECT a, b, c FROM t ORDER BY a"))
  eq(#rows, 2, "rows")
  eq(rows[1].b, "it's \"quoted\"; DROP TABLE t", "text round-trips")
  eq(rows[1].c, 2.5, "real")
  eq(rows[2].b, nil, "NULL is absent")
  local ok, err = db:run("SELECT ?", 1, 2)
  check(not ok and err:find("takes 1 parameters, 2 given", 1, true), err)
  ok, err = db:run("SELECT 1; SELECT 2")
  check(not ok and err:find("one statement per call", 1, true), err)
  ok, err = db:rows("SELEC 1")
  check(not ok and err:find("syntax error", 1, true), err)
  db:close()
  db:close()
  check(not pcall(db.rows, db, "SELECT 1"), "a closed database raises")
end)

test("open creates the folder, the schema (versioned, emmy's application_id) and WAL journaling", function()
  local path = tmpdir() .. "/deep/er/tune.db"
  local db = assert(tunedb.open(path))
  db:close()
  local h = assert(sqlite.open(path))
  eq(h:rows("PRAGMA user_version")[1].user_version, tunedb.SCHEMA, "schema version")
  eq(h:rows("PRAGMA application_id")[1].application_id, tunedb.APP_ID, "application_id")
  eq(h:rows("PRAGMA journal_mode")[1].journal_mode, "wal", "WAL")
  local names = {}
  for _, r in ipairs(h:rows("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")) do names[#names + 1] = r.name end
  eq(table.concat(names, " "), "contexts kernels measurements runs variants", "tables")
  -- a newer schema is refused with one line
  assert(h:exec("PRAGMA user_version = 99"))
  h:close()
  local db2, err = tunedb.open(path)
  check(not db2 and err:find("has schema version 99, written by a newer emmy", 1, true), err)
end)

test("measurements persist per context; the latest is served, the best is the fastest ok row", function()
  local path = tmpdir() .. "/tune.db"
  local db = assert(tunedb.open(path))
  local run = db:begin_run("emmy tune Qwen/Qwen3-Embedding-0.6B --layer 0", "abc123", true)
  local ctx = db:context(CTX)
  eq(db:context(CTX), ctx, "the same context, the same id")
  local rank = db:context { gpu = CTX.gpu, cc = CTX.cc, driver = CTX.driver, nvrtc = CTX.nvrtc, regime = "rank" }
  check(rank ~= ctx, "another regime is another context")
  db:kernel { hash = "7363a2a4628f6ae2", name = "k_linear_7363a2", ops = "linear", features = { M = 512, N = 2048 },
    flops = 2 * 512 * 2048 * 1024, bytes = 6 * 2 ^ 20 }
  local v1 = db:variant("7363a2a4628f6ae2", "BK=64,BM=64,TMA=1", "warp", { TILE = "64x64" })
  local v2 = db:variant("7363a2a4628f6ae2", "BK=32,BM=64,TMA=0", "warp")
  local v3 = db:variant("7363a2a4628f6ae2", "BK=64,BM=128,TMA=1", "warp")
  eq(db:variant("7363a2a4628f6ae2", "BK=64,BM=64,TMA=1"), v1, "the same variant, the same id")
  db:record { run_id = run, context_id = ctx, variant_id = v1, status = "ok", median_us = 16.3, min_us = 16.1,
    p20_us = 16.2, p80_us = 16.4, samples = 50, regs = 48, spills = 0, smem = 34816, compile_ms = 67, search_order = 1 }
  db:record { run_id = run, context_id = ctx, variant_id = v2, status = "ok", median_us = 18.3, samples = 50 }
  db:record { run_id = run, context_id = ctx, variant_id = v3, status = "wrong",
    error = "max rel 0.5, 12 mismatches at \"m=3\"" }
  db:record { run_id = run, context_id = rank, variant_id = v2, status = "ok", median_us = 1.0 }
  db:end_run(run)
  db:close()
  -- a new process (here: a new handle) sees every row: nothing to re-measure
  db = assert(tunedb.open(path))
  local b = db:best(ctx, "7363a2a4628f6ae2")
  eq(b.knobs, "BK=64,BM=64,TMA=1", "fastest ok row in the deploy context (the rank row is not mixed in)")
  eq(b.median_us, 16.3, "its time")
  local m3 = db:measured(ctx, v3)
  eq(m3.status, "wrong", "a failure is a row")
  eq(m3.error, "max rel 0.5, 12 mismatches at \"m=3\"", "its error text, quotes kept")
  eq(db:measured(rank, v1), nil, "not measured in that context")
  local n = db:status_counts(ctx, "7363a2a4628f6ae2")
  eq(n.ok, 2, "ok rows")
  eq(n.wrong, 1, "wrong rows")
  local bad, err = pcall(db.record, db, { context_id = ctx, variant_id = v1, status = "fast" })
  check(not bad and tostring(err):find("status fast is not one of", 1, true), tostring(err))
  db:close()
end)

test("a process killed mid-tune loses at most the variant in flight", function()
  local path = tmpdir() .. "/tune.db"
  -- a child records 3 measurements, then is killed (SIGKILL) before it can close the database
  local script = tmpdir() .. "/child.lua"
  write_file(script, ([[
local tunedb = require "emmy.tunedb"
local db = assert(tunedb.open(%q))
local ctx = db:context { gpu = "g", cc = "9.0", driver = "d", nvrtc = "n", regime = "deploy" }
db:kernel { hash = "h", name = "k" }
for i = 1, 3 do
  db:record { context_id = ctx, variant_id = db:variant("h", "BM=" .. i), status = "ok", median_us = i }
end
os.execute("kill -9 $PPID")
]]):format(path))
  sh(("%s %s"):format(shell_quote(BIN), shell_quote(script)))
  local db = assert(tunedb.open(path))
  local ctx = db:context { gpu = "g", cc = "9.0", driver = "d", nvrtc = "n", regime = "deploy" }
  eq(db:status_counts(ctx, "h").ok, 3, "all three committed rows survive the kill")
  db:close()
end)

test("the run lock: shared beside shared, exclusive alone, released by close; another handle's SQLite locks survive a close", function()
  local path = tmpdir() .. "/tune.db"
  assert(tunedb.open(path)):close()
  local a, b = assert(sqlite.open(path)), assert(sqlite.open(path))
  assert(a:lock("shared"))
  assert(b:lock("shared"))
  local ok, err = b:lock("exclusive")
  check(not ok and err == "busy", "exclusive beside a shared lock: " .. tostring(err))
  a:close()
  assert(b:lock("exclusive"))
  local c = assert(sqlite.open(path))
  ok, err = c:lock("shared", 50)
  check(not ok and err == "busy", "shared beside an exclusive lock, after a wait: " .. tostring(err))
  assert(b:lock("shared")) -- a downgrade, at once
  assert(c:lock("shared"))
  b:close()
  c:close()
  -- closing a handle that took the lock must not drop the POSIX locks SQLite holds through another handle: a
  -- WAL database's -wal stays while a connection of this process is open, even after another process came and went
  local keep = assert(sqlite.open(path))
  assert(keep:exec("CREATE TABLE IF NOT EXISTS t (a); INSERT INTO t VALUES (1)"))
  local l = assert(sqlite.open(path))
  assert(l:lock("shared"))
  l:close()
  local script = tmpdir() .. "/peek.lua"
  write_file(script, ("local h = assert(require('emmy.sqlite').open(%q)) assert(h:rows('SELECT COUNT(*) FROM t')) h:close()"):format(path))
  local code, out = sh(("%s %s"):format(shell_quote(BIN), shell_quote(script)))
  eq(code, 0, out)
  check(require("emmy.sys").stat(path .. "-wal"), "the -wal of an open connection was removed by another process")
  eq(keep:rows("SELECT COUNT(*) AS n FROM t")[1].n, 1, "the open connection still reads")
  keep:close()
  check(not pcall(keep.lock, keep, "shared"), "a closed handle raises")
  check(not pcall(a.lock, a, "sideways"), "an unknown mode raises")
end)

return T
