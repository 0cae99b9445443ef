-- 050_use_tma.lua — TMA transport (cp.async.bulk.tensor into shared memory on an mbarrier). It feeds the
-- tensor-core tiers only, so it is refused while a contraction is on the scalar tier.
return {
  { name = "use_tma", family = "STAGE", kinds = { "contraction" }, knobs = { TMA = 0 },
    gate = function(k, dev)
      if (dev.cc_major or 0) < 9 then return false, ("compute capability %s has no TMA (needs 9.0)"):format(dev.cc) end
      return false, "TMA staging needs the warp tier (MMA=1), which is not implemented yet"
    end },
}
