-- 010_canonicalize — rewrites ops into the forms the kernel former knows: softmax.int as _to_copy +
-- _softmax, contiguous/clone dropped (every kernel output is contiguous; a clone is a view-free copy).
local rewrite = require "emmy.rewrite"

return {
  name = "canonicalize",
  summary = "softmax.int -> _softmax (+ cast); contiguous/clone dropped",
  run = function(ctx)
    ctx.graph = rewrite.rebuild(ctx.graph, function(n, b, a)
      if n.op == "aten.contiguous.default" or n.op == "aten.clone.default" then
        return a.self
      end
      if n.op == "aten.softmax.int" then
        local x = a.self
        if a.dtype and a.dtype ~= b:dtype(x) then x = b:op("aten._to_copy.default", { self = x, dtype = a.dtype }) end
        return b:op("aten._softmax.default", { self = x, dim = a.dim, half_to_float = false })
      end
    end)
  end,
}
