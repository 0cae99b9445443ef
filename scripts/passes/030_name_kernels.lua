-- 030_name_kernels — gives each kernel its reproducer (the sub-graph of original ops it realizes, as a
-- self-contained graph) and its name k_<ops>_<hash6>: <ops> from the torch ops it realizes, <hash6> from
-- the reproducer's structural hash (names and hints excluded), so equal structures share a name.
local opclass = require "emmy.opclass"

return {
  name = "name_kernels",
  summary = "reproducer sub-graph per kernel; names k_<ops>_<hash6>",
  run = function(ctx)
    local g = ctx.graph
    local nodes = {}
    for _, n in ipairs(g:nodes()) do nodes[n.name] = n end
    for i, k in ipairs(ctx.kernels) do
      local repro, err = g:subgraph(k.nodes, k.outputs, "kernel")
      if not repro then error(("kernel %d: %s"):format(i, err), 0) end
      local parts, seen = {}, {}
      for _, v in ipairs(k.nodes) do
        local s = opclass.short_name(nodes[v])
        if s ~= "" and not seen[s] then
          seen[s] = true
          parts[#parts + 1] = s
        end
      end
      if #parts == 0 then parts[1] = k.copy_out and "copy" or k.kind end
      while #parts > 4 do table.remove(parts) end
      k.hash = repro:hash()
      k.name = ("k_%s_%s"):format(table.concat(parts, "_"), k.hash:sub(1, 6))
      k.repro = repro
      repro:meta("kernel", k.name)
      repro:meta("kind", k.kind)
      if k.dual then repro:meta("dual", "1") end
      -- the structural knobs it was formed under: re-forming the reproducer (the bench worker, run --ir) applies
      -- them, so a kernel of a non-default fork (a folded RMSNorm, merged siblings) re-forms as itself
      local sk = {}
      for key in pairs(require("emmy.compiler").STRUCTURAL) do
        if ctx.knobs[key] then sk[#sk + 1] = key .. "=" .. tostring(ctx.knobs[key]) end
      end
      table.sort(sk)
      repro:meta("structural", table.concat(sk, ","))
      -- the epilogue reads the result within D-wide column segments (RoPE): the emitter stages the tile
      if k.stage then repro:meta("stage", tostring(k.stage)) end
      if k.stage then repro:meta("stage_step", tostring(k.stage_step or 1)) end
      if k.anchor then repro:meta("anchor", k.anchor) end
      -- which original torch ops (by module) the kernel covers, fully or in part
      local mods, order = {}, {}
      for _, v in ipairs(k.nodes) do
        local n = nodes[v]
        local key = (n.module or "?") .. " " .. (n.src_op or n.op)
        if not mods[key] then
          mods[key] = { module = n.module, op = n.src_op or n.op, nodes = 0 }
          order[#order + 1] = key
        end
        mods[key].nodes = mods[key].nodes + 1
      end
      k.provenance = {}
      for _, key in ipairs(order) do k.provenance[#k.provenance + 1] = mods[key] end
    end
  end,
}
