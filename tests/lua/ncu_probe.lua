-- A helper of tests/lua/test_bench.lua: emmy.profile.ncu against the ncu that EMMY_NCU names (a stand-in).
local profile = require "emmy.profile"
local out, dropped = profile.ncu("true", "--kernel-name regex:^k_", { clock_control = "none" })
if not out then print("error: " .. tostring(dropped)) return 0 end
for _, m in ipairs(dropped) do print("dropped " .. m) end
local agg = profile.aggregate(profile.parse_csv(out))
print(("duration %.1f"):format(agg.duration_us))
return 0
