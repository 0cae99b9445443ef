-- The tune-model findings report (issue 9) rendered from a fixture work dir (tests/fixtures/workdir/, no GPU):
-- the triage's classes and order against values worked out by hand, and the report's sections and numbers.
local triage = require "emmy.triage"
local report = require "reports.tune_findings"

local T = {}
local function test(name, fn) T[#T + 1] = { name, fn } end
local W = ROOT .. "/tests/fixtures/workdir"

test("triage of the fixture work dir: four classes, ordered by the µs at stake; the dominating kernels", function()
  local d = triage.from_workdir(W)
  local by = {}
  for i, f in ipairs(d.findings) do by[f.kernel] = f f.order = i end
  eq(#d.findings, 4)
  -- q_norm+RoPE is wrong: a bench failure, its whole torch time at stake (48.5 µs)
  eq(by.k_rms_norm_rope_40c43c.class, "bench failure")
  eq(by.k_rms_norm_rope_40c43c.order, 1)
  check(by.k_rms_norm_rope_40c43c.repro:find("EMMY_KNOBS=k_rms_norm_rope_40c43c:VEC=4", 1, true), "the cluster's repro")
  -- attention 23.6 against eager's 18.2: picks are the best, no re-tune: codegen quality, 5.4 µs at stake
  eq(by.k_sdpa_123d66.class, "codegen quality")
  check(math.abs(by.k_sdpa_123d66.at_stake_us - 5.4) < 1e-9, tostring(by.k_sdpa_123d66.at_stake_us))
  eq(by.k_sdpa_123d66.torch_backend, "eager")
  check(by.k_sdpa_123d66.evidence[1]:find("duration 22.9 µs against eager's 17.1", 1, true), by.k_sdpa_123d66.evidence[1])
  -- down 15.1 against 12.6: the offline pick is 1.12x and a re-tune found 17.9 < 20.5 / 1.05: a confirmed shortfall
  eq(by.k_linear_add_f97280.class, "search shortfall")
  check(math.abs(by.k_linear_add_f97280.at_stake_us - 2.5) < 1e-9, "15.1 - 12.6")
  check(table.concat(by.k_linear_add_f97280.evidence, "\n"):find("— confirmed", 1, true), "re-tune")
  eq(by.k_linear_add_f97280.priority, "high")
  -- q_proj 11.3 against 9.2, every row scalar: a lockout with the gate's file:line
  eq(by.k_linear_7363a2.class, "tier lockout")
  eq(by.k_linear_7363a2.root_cause, "rules/tile/010_partition_loops.lua:16: K % 64 ~= 0")
  eq(by.k_sdpa_123d66.order, 2)
  eq(by.k_linear_add_f97280.order, 3)
  eq(by.k_linear_7363a2.order, 4)
  -- not behind: gate/up 20.6 vs 20.8, k/v 1.09x, o_proj 1.06x, the norms
  eq(#d.fine, 5)
  eq(table.concat(d.dominating.names, ","), "k_sdpa_123d66,k_linear_silu_mul_b9e1e1,k_linear_add_f97280,k_linear_ad15f3,"
    .. "k_linear_add_67d546,k_linear_7363a2")
  check(math.abs(d.dominating.us - 97.9) < 1e-9, tostring(d.dominating.us))
end)

test("the report renders from the fixture: header, tables, one section per finding, prior quality, workflow notes", function()
  local md = report.render(triage.from_workdir(W))
  for _, s in ipairs { "# Qwen/Qwen3-Embedding-0.6B — layer 0 tune findings", "- **Status:** 4 findings",
    "- **Command:** `emmy scripts/workflows/tune_model.lua --model Qwen/Qwen3-Embedding-0.6B`",
    "dynamic seq_len, benched at seq_len=512 (symbolic hint)", "131.0 s wall, 245 variants benched, 0 served from the DB; status split: launch_fail 1, ok 244",
    "## Where emmy stands", "| emmy | 122.0 | 120.8–123.2 | 1.67x |", "| transformers (eager module) | 231.0 |",
    "| k_sdpa_123d66 | self_attn scaled_dot_product_attention | full | 23.6 | 24.0 | 18.2 | 18.5 | 0.77x | 20% |",
    "97.9 µs together", "## Finding 1 — k_rms_norm_rope_40c43c: emmy's variant is wrong",
    "## Finding 2 — k_sdpa_123d66: its best variant is 1.30x torch's eager", "- **Class:** search shortfall; **at stake:** 2.5 µs",
    "- **Root cause:** rules/tile/010_partition_loops.lua:16: K % 64 ~= 0", "=== offline prior ===", "=== online prior ===",
    "| k_linear_add_f97280 | 52 | 1.12x | 7 | 0.61 | no |", "No row carries an online prediction.", "## Repro and artifacts",
    "## Workflow notes", "| tune | ok | 212.5 |", "- ncu: counters read with --clock-control none" } do
    check(md:find(s, 1, true), "missing: " .. s .. "\n" .. md)
  end
  -- prose wrapped at 120 columns (table rows may overflow)
  for line in md:gmatch("[^\n]+") do
    if not line:match("^|") and not line:match("^%- %*%*") then check(#line <= 120 + 40, "long line: " .. line) end
  end
  eq(report.wrap("a b c", 3), "a b\nc")
end)

test("the workflow's report step renders a work dir's files into the report (--from report, no GPU)", function()
  local w = tmpdir()
  sh(("cp -r %s/. %s/"):format(shell_quote(W), shell_quote(w)))
  local out_md = tmpdir() .. "/findings.md"
  local code, out, err = emmy { ROOT .. "/scripts/workflows/tune_model.lua", "--work", w, "--from", "report", "--report", out_md }
  eq(code, 0, err .. out)
  check(out:find("report: " .. out_md .. " (4 findings)", 1, true), out)
  local md = assert(io.open(out_md)):read("*a")
  check(md:find("## Finding 3 — k_linear_add_f97280: the search did not find its best variant", 1, true), md)
  check(md:find("| report | ok |", 1, true) or md:find("| tune | ok | 212.5 |", 1, true), "the steps of run.json: " .. md)
  local f = require("cjson").decode(assert(io.open(w .. "/findings.json")):read("*a"))
  eq(#f.findings, 4)
end)

return T
