-- tools/nvrtc_cubin.lua FILE.cu OUT.cubin [ARCH] — compiles an emitted kernel to a cubin with emmy's NVRTC binding (the
-- path emmy itself compiles by; no CUDA toolkit needed) and prints "status registers spill-stores" (tools/sass_count.sh
-- uses it where there is no nvcc).
local nvrtc = require "emmy.nvrtc"
local src_path, out_path, arch = arg[1], arg[2], arg[3] or "sm_90a"
if not src_path or not out_path then
  io.stderr:write("usage: emmy tools/nvrtc_cubin.lua FILE.cu OUT.cubin [ARCH]\n")
  os.exit(2)
end
local f = assert(io.open(src_path, "rb"))
local src = f:read("*a")
f:close()
local r, err = nvrtc.compile({ source = src, arch = arch, name = src_path:match("[^/]*$"), cache = false })
if not r then
  io.stderr:write("nvrtc_cubin: ", tostring(err), "\n")
  os.exit(2)
end
if r.status ~= "ok" or not r.cubin then
  print(r.status, (r.log or ""):match("[^\n]*error[^\n]*") or "")
  os.exit(1)
end
local o = assert(io.open(out_path, "wb"))
o:write(r.cubin)
o:close()
print(r.status, r.regs or 0, r.spill_stores or 0)
