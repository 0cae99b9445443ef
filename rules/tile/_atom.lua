-- _atom.lua — helpers shared by the tile rules: the options a knob may take and small predicates.
local A = {}

-- Powers of two from lo to hi.
function A.pow2(lo, hi)
  local out, x = {}, lo
  while x <= hi do
    out[#out + 1] = x
    x = x * 2
  end
  return out
end

-- The smallest multiple of 32 threads covering n, capped at 1024.
function A.warps_for(n)
  local t = math.ceil(n / 32) * 32
  return math.max(32, math.min(1024, t))
end

function A.is_half(dtype) return dtype == "bf16" or dtype == "f16" end

return A
