-- 005_split_cone.lua — the structural fork SPLIT_CONE: whether a contraction's computed operand cone (the
-- RMSNorm feeding q/k/v or gate/up) is its own producer kernel (1) or recomputed in the contraction's
-- prologue (0). The kernel former reads the pin (EMMY_SPLIT_CONE, EMMY_KNOBS) before kernels exist; this
-- rule records the choice in every contraction's knob string and says why a cone was or was not folded.
return {
  { name = "split_cone", family = "STRUCT", kinds = { "contraction" }, knobs = { SPLIT_CONE = 1 },
    gate = function(k, dev)
      if k.prologue_reductions > 0 then
        return true, ("%d row reduction(s) folded into the left operand (SPLIT_CONE=0)"):format(k.prologue_reductions)
      end
      return true, "operand read from memory"
    end,
    fork = function(k, dev) return { { SPLIT_CONE = k.split_cone } } end },
}
