-- emmy info — what this emmy is and what it can reach: version, home, CPUs, NVRTC, the CUDA driver and GPU.
local cli = require "emmy.cli"
local sys = require "emmy.sys"

return {
  summary = "show the build, the CPU count, NVRTC and the GPU (or why there is none)",
  usage = "usage: emmy info [--json]\n\n  Probes NVRTC and the CUDA driver with dlopen; a machine without them is reported, not an error.",
  run = function(argv)
    local opts = cli.parse(argv, { flags = { ["--json"] = { kind = "bool" } } }, "info")
    local v, rev = sys.version()
    local nvrtc, nerr = sys.nvrtc()
    local gpu, gerr = sys.cuda()
    if opts.json then
      print(require("cjson").encode { version = v, git = rev, home = EMMY_HOME, cpus = sys.nproc(),
        nvrtc = nvrtc or false, nvrtc_error = nerr, gpu = gpu or false, gpu_error = gerr })
      return 0
    end
    print(("emmy      %s (git %s)"):format(v, rev))
    print(("home      %s"):format(EMMY_HOME))
    print(("cpus      %d"):format(sys.nproc()))
    print(("nvrtc     %s"):format(nvrtc or ("unavailable: " .. nerr)))
    if gpu then
      print(("gpu       %s (sm_%s, %d SMs), %d device(s), driver %d.%d"):format(gpu.name, gpu.cc:gsub("%.", ""),
        gpu.sm_count, gpu.device_count, math.floor(gpu.driver_version / 1000), math.floor((gpu.driver_version % 1000) / 10)))
    else
      print(("gpu       none: %s"):format(gerr))
    end
    return 0
  end,
}
