-- emmy.verdict — the Done-when rows of issues 19 (GEMM) and 20 (attention) read from the JSON files bench/status.sh
-- writes (status_squares.json, status_gemm.json, status_attention.json, status_layer_<model>.json), each row with its
-- bound and whether it is met, and whether the machine is the one the issues are judged on (an H200). Nothing is
-- measured here: bench/verdict.lua prints what these functions return.
local M = {}

-- The bounds (issue 19: squares at least 0.95x cuBLAS's TFLOP/s, every projection at most torch's best kernel time,
-- the by-kind matmul row at most torch.compile's; issue 20: every row at most torch's fastest SDPA, batch 1 seq 512
-- at most 0.8 of it, the layer's by-kind attention row at most torch.compile's).
M.SQUARES_MIN, M.PROJECTION_MAX, M.ATTENTION_MAX, M.ATTENTION_B1S512_MAX = 0.95, 1.0, 1.0, 0.8

-- The chosen variant's and the fastest timed variant's µs of (case, kernel) among a bench's variants.
local function times(variants, case, kernel)
  local chosen, best
  for _, v in ipairs(variants or {}) do
    if v.case == case and (not kernel or v.kernel == kernel) and v.us and v.role ~= "stamp" and v.role ~= "diag" then
      if v.role == "chosen" then chosen = v.us end
      if not best or v.us < best then best = v.us end
    end
  end
  return chosen, best
end

local function row(issue, what, emmy, best, torch, torch_name, ratio, bound, met)
  return { issue = issue, what = what, emmy_us = emmy, best_us = best, torch_us = torch, torch = torch_name,
    ratio = ratio, bound = bound, met = met }
end

-- Issue 19's GEMM rows of a bench/gemm.lua JSON: each kernel's fastest timed variant (the tune's stand-in) against
-- torch's faster backend — squares (of_cublas) as a ratio of TFLOP/s at least SQUARES_MIN, the projections as a ratio
-- of times at most PROJECTION_MAX.
local function gemm_rows(g, of_cublas)
  local out = {}
  for _, c in ipairs((g or {}).cases or {}) do
    local chosen, best = times(g.variants, c.label, c.kernel)
    local t = c.torch and c.torch.best_us
    local r = best and t and (of_cublas and t / best or best / t)
    local met = r and (of_cublas and r >= M.SQUARES_MIN or not of_cublas and r <= M.PROJECTION_MAX) or false
    out[#out + 1] = row(19, of_cublas and c.label .. " GEMM (TFLOP/s of cuBLAS's)" or ("%s %s"):format(c.label, c.kernel),
      chosen, best, t, c.torch and c.torch.best, r,
      of_cublas and (">= %.2f"):format(M.SQUARES_MIN) or ("<= %.2f"):format(M.PROJECTION_MAX), met)
  end
  return out
end
function M.squares(g) return gemm_rows(g, true) end
function M.projections(g) return gemm_rows(g, false) end

-- Issue 20's table: the rules' chosen variant against torch's fastest SDPA; batch 1 seq 512 bound tighter.
function M.attention(a)
  local out = {}
  for _, c in ipairs((a or {}).cases or {}) do
    local chosen = c.chosen and c.chosen.us
    local t = c.torch and c.torch.best_us
    local bound = (c.batch == 1 and c.seq == 512) and M.ATTENTION_B1S512_MAX or M.ATTENTION_MAX
    local r = chosen and t and chosen / t
    out[#out + 1] = row(20, c.label, chosen, c.best and c.best.us, t, c.torch and c.torch.best, r, ("<= %.2f"):format(bound),
      r and r <= bound or false)
  end
  return out
end

-- A layer bench's (60_bench_compare.json) by-kind rows of kind against torch.compile's; issue gives the row's issue.
function M.by_kind(bc, model, kind, issue)
  for _, r in ipairs(((bc or {}).by_kind or {}).rows or {}) do
    if r.kind == kind and r.emmy and r.tcompile then
      local e, t = r.emmy.us, r.tcompile.us
      return row(issue, ("%s layer 0, by-kind %s row"):format(model, kind), e, nil, t, "tcompile", e / t, "<= 1.00", e <= t)
    end
  end
  return nil
end

-- Every row from the files of bench/status.sh's folders dirs (a list: each file from the last folder that has it,
-- so that two calls' sections make one table; read_json: path -> table or nil), with the device.
function M.collect(dirs, read_json)
  local v = { rows = {}, missing = {} }
  local function add(rows) for _, r in ipairs(rows) do v.rows[#v.rows + 1] = r end end
  local function file(name)
    local d
    for i = #dirs, 1, -1 do
      d = read_json(dirs[i] .. "/" .. name)
      if d then break end
    end
    if not d then v.missing[#v.missing + 1] = name end
    v.device = v.device or (d and d.device)
    return d
  end
  add(M.squares(file("status_squares.json")))
  add(M.projections(file("status_gemm.json")))
  local q = file("status_layer_Qwen_Qwen3-Embedding-0_6B.json")
  add({ M.by_kind(q, "Qwen3-Embedding-0.6B", "matmul", 19) })
  add(M.attention(file("status_attention.json")))
  add({ M.by_kind(q, "Qwen3-Embedding-0.6B", "attention", 20) })
  v.h200 = v.device and v.device:find("H200", 1, true) ~= nil or false
  v.met, v.over = 0, 0
  for _, r in ipairs(v.rows) do if r.met then v.met = v.met + 1 else v.over = v.over + 1 end end
  return v
end

local function f1(x) return x and ("%.1f"):format(x) or "-" end

-- The verdict as markdown lines: the machine, a table of every row, the count met.
function M.markdown(v)
  local out = {
    ("Device: %s — %s."):format(v.device or "unknown", v.h200 and "the machine issues 19 and 20 are judged on"
      or "not an H200: a picture, not the Done-when's verdict"),
    "",
    "| issue | row | emmy µs (chosen) | best timed µs | torch µs | torch | ratio | bound | met |",
    "| ---: | --- | ---: | ---: | ---: | --- | ---: | --- | --- |",
  }
  for _, r in ipairs(v.rows) do
    out[#out + 1] = ("| %d | %s | %s | %s | %s | %s | %s | %s | %s |"):format(r.issue, r.what, f1(r.emmy_us), f1(r.best_us),
      f1(r.torch_us), r.torch or "-", r.ratio and ("%.3f"):format(r.ratio) or "-", r.bound, r.met and "yes" or "**no**")
  end
  out[#out + 1] = ""
  out[#out + 1] = ("%d of %d rows met%s."):format(v.met, v.met + v.over,
    #v.missing > 0 and ("; not found: " .. table.concat(v.missing, ", ")) or "")
  return out
end

return M
