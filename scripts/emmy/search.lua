-- emmy.search — the tuner's search over one kernel's candidates: flat and prior-guided. Every candidate is
-- scored by the prior; the best-scored are measured first, in batches; some picks explore (drawn at random
-- from the rest, seeded) so a misleading prior cannot hide a region; the search stops after `patience`
-- measurements without a new best, at `max_candidates`, or when nothing is left. Measuring is the caller's
-- (a GPU bench, rows served from the tune DB, or a table of known times in a test), and so is what a failure
-- means: a row whose status is not "ok" never becomes the best.
local M = {}

-- A small deterministic generator (the same seed, the same exploration), independent of math.random's state.
local function rng(seed)
  local s = (seed or 1) % 2147483647
  if s <= 0 then s = s + 2147483646 end
  return function(n)
    s = s * 16807 % 2147483647
    return 1 + s % n
  end
end

-- opts: candidates = {{knobs=, string=}, ...}; score = fn(c) -> predicted µs (lower first) | nil (last);
-- measure = fn(c, order, online) -> row {status = "ok"|..., median_us = µs, ...} (online: the corrected
-- prediction once the online correction has been fit, else nil); patience (default 24);
-- max_candidates (default all); batch (default 8); explore (share of each batch, default 0.25); seed;
-- online = false keeps the prior's order (no refit); shrink (default 1) damps the online corrections.
-- Returns {best = row|nil, best_candidate, rows = {{candidate, row, order, explored}}, measured = n,
-- stopped = "patience"|"max_candidates"|"exhausted"}.
function M.run(opts)
  local cands = opts.candidates
  local patience, batch = opts.patience or 24, opts.batch or 8
  local max_n = math.min(opts.max_candidates or #cands, #cands)
  local explore = opts.explore or 0.25
  local rand = rng(opts.seed)
  -- prior order: scored candidates by predicted time, unscored after them in their given order
  local scored = {}
  for i, c in ipairs(cands) do scored[i] = { c = c, s = opts.score and opts.score(c) or nil, i = i } end
  -- by the current prediction (the online-corrected one once fit), unscored last, ties in the given order
  local function by_prediction(a, b)
    local x, y = a.adj or a.s, b.adj or b.s
    if x and y then return x < y or (x == y and a.i < b.i) end
    if x or y then return x ~= nil end
    return a.i < b.i
  end
  table.sort(scored, by_prediction)
  local done, rows = {}, {}
  local best, best_c, since = nil, nil, 0
  local next_prior = 1
  local function pick_prior()
    while next_prior <= #scored and done[scored[next_prior].i] do next_prior = next_prior + 1 end
    return scored[next_prior]
  end
  local function pick_random()
    local left = {}
    for _, e in ipairs(scored) do if not done[e.i] then left[#left + 1] = e end end
    return #left > 0 and left[rand(#left)] or nil
  end
  -- the online correction, refit after every batch: per knob value, the mean log ratio measured / predicted of
  -- the rows measured so far (shrunk toward 0 by `shrink` pseudo-rows); a candidate's score is the prior's times
  -- exp(sum of its values' corrections) — additive in log time over knob values, like depth-1 boosted stumps
  local shrink = opts.shrink or 1
  local function refit()
    local sum, cnt = {}, {}
    for _, r in ipairs(rows) do
      local e = r.entry
      if r.row.status == "ok" and r.row.median_us and e.s and e.s > 0 then
        local res = math.log(r.row.median_us / e.s)
        for key, v in pairs(r.candidate.knobs or {}) do
          local kv = key .. "=" .. tostring(v)
          sum[kv], cnt[kv] = (sum[kv] or 0) + res, (cnt[kv] or 0) + 1
        end
      end
    end
    for _, e in ipairs(scored) do
      if e.s and not done[e.i] then
        local corr = 0
        for key, v in pairs(e.c.knobs or {}) do
          local kv = key .. "=" .. tostring(v)
          if cnt[kv] then corr = corr + sum[kv] / (cnt[kv] + shrink) end
        end
        e.adj = e.s * math.exp(corr)
      end
    end
    table.sort(scored, by_prediction)
    next_prior = 1
  end
  local stopped = "exhausted"
  while true do
    if #rows >= max_n then
      if max_n < #cands then stopped = "max_candidates" end
      break
    end
    if #rows > 0 and opts.online ~= false then refit() end
    local n_explore = #rows == 0 and 0 or math.floor(batch * explore + 0.5)
    local picks = {}
    for j = 1, batch do
      local e = (j > batch - n_explore) and pick_random() or pick_prior()
      if not e then break end
      done[e.i] = true
      picks[#picks + 1] = { e = e, explored = j > batch - n_explore }
    end
    if #picks == 0 then break end
    local stop = false
    for _, p in ipairs(picks) do
      if #rows >= max_n then stopped, stop = "max_candidates", true break end
      local row = opts.measure(p.e.c, #rows + 1, p.e.adj) or { status = "no_result" }
      rows[#rows + 1] = { candidate = p.e.c, row = row, order = #rows + 1, explored = p.explored, entry = p.e }
      if row.status == "ok" and row.median_us and (not best or row.median_us < best.median_us) then
        best, best_c, since = row, p.e.c, 0
      else
        since = since + 1
      end
      if since >= patience then stopped, stop = "patience", true break end
    end
    if stop then break end
  end
  return { best = best, best_candidate = best_c, rows = rows, measured = #rows, stopped = stopped }
end

return M
