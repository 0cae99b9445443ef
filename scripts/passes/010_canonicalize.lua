-- 010_canonicalize — rewrites ops into the forms the kernel former knows: softmax.int as _to_copy +
-- _softmax, matmul with a 1-d operand as a 2-d one between unsqueeze and squeeze, contiguous/clone dropped (every
-- kernel output is contiguous; a clone is a view-free copy).
local rewrite = require "emmy.rewrite"

return {
  name = "canonicalize",
  summary = "softmax.int -> _softmax (+ cast); 1-d matmul operands unsqueezed; contiguous/clone dropped",
  run = function(ctx)
    ctx.graph = rewrite.rebuild(ctx.graph, function(n, b, a)
      if n.op == "aten.contiguous.default" or n.op == "aten.clone.default" then
        return a.self
      end
      if n.op == "aten.softmax.int" then
        local x = a.self
        if a.dtype and a.dtype ~= b:dtype(x) then x = b:op("aten._to_copy.default", { self = x, dtype = a.dtype }) end
        return b:op("aten._softmax.default", { self = x, dim = a.dim, half_to_float = false }, n.name)
      end
      if n.op == "aten.matmul.default" then
        -- torch.matmul's 1-d operand: a dim of 1 added (in front of the left, behind the right), dropped after
        local l, r = #b.g:value(a.self).shape == 1, #b.g:value(a.other).shape == 1
        if l or r then
          local x = l and b:op("aten.unsqueeze.default", { self = a.self, dim = 0 }) or a.self
          local y = r and b:op("aten.unsqueeze.default", { self = a.other, dim = 1 }) or a.other
          local m = b:op("aten.matmul.default", { self = x, other = y })
          if r then m = b:op("aten.squeeze.dim", { self = m, dim = -1 }, not l and n.name or nil) end
          if l then m = b:op("aten.squeeze.dim", { self = m, dim = -2 + (r and 1 or 0) }, n.name) end
          return m
        end
      end
    end)
  end,
}
