-- 005_structural.lua — structural forks: knobs that change which kernels exist. The kernel former reads
-- their pins (EMMY_<KNOB>, EMMY_KNOBS) before kernels exist; these rules record the choice in every
-- contraction's knob string and say what it did to the kernel.
--   SPLIT_CONE     1: a contraction's computed operand cone (the RMSNorm feeding q/k/v or gate/up) is its own
--                  producer kernel; 0: recomputed in the contraction's prologue.
--   MERGE_SIBLINGS 1: linears reading the same operand (q/k/v, gate/up) are one kernel, N side by side;
--                  0: one kernel each.
--   DUAL_GATE      1: two linears of equal width on one operand (gate/up, k/v) are one kernel with two
--                  accumulators over one tile, so SiLU(gate)·up is their epilogue; 0: apart.
return {
  { name = "split_cone", family = "STRUCT", kinds = { "contraction" }, knobs = { SPLIT_CONE = 1 },
    gate = function(k, dev)
      if k.prologue_reductions > 0 then
        return true, ("%d row reduction(s) folded into the left operand (SPLIT_CONE=0)"):format(k.prologue_reductions)
      end
      return true, "operand read from memory"
    end,
    fork = function(k, dev) return { { SPLIT_CONE = k.split_cone } } end },
  { name = "merge_siblings", family = "MERGE", kinds = { "contraction" }, knobs = { MERGE_SIBLINGS = 0 },
    gate = function(k, dev)
      if k.siblings > 1 then return true, ("%d linears on one operand, N side by side"):format(k.siblings) end
      return true, "one linear"
    end,
    fork = function(k, dev) return { { MERGE_SIBLINGS = (k.siblings > 1 and not k.dual) and 1 or 0 } } end },
  { name = "dual_gate", family = "DUAL", kinds = { "contraction" }, knobs = { DUAL_GATE = 0 },
    gate = function(k, dev)
      if k.dual then return true, "two accumulators over one tile (DUAL_GATE=1)" end
      return true, "one accumulator"
    end,
    fork = function(k, dev) return { { DUAL_GATE = k.dual and 1 or 0 } } end },
}
