-- fuzz.lua - spec helpers for the libFuzzer targets of `make fuzz`
-- (spec/support/fuzz_*.c, built in build-fuzz/ by clang): building them once,
-- writing seed inputs, running one.
local H = require("helpers")

local F = {}

local built, why

-- Build every target (once per spec run): true, or false and why they
-- cannot be built here (no clang, or a clang without its libFuzzer runtime).
-- Any other failure of the build raises.
function F.build()
  if built ~= nil then return built, why end
  built = false
  if not H.run("/bin/sh", { "-c", "command -v clang" }).stdout:match("clang") then
    why = "clang is not installed"
    return built, why
  end
  local cpus = H.run("nproc", {}).stdout:match("%d+") or "2"
  local r = H.run("make", { "-C", H.root, "-j" .. cpus, "fuzz" }, { timeout = 600 })
  if r.code ~= 0 then
    if (r.stderr .. r.stdout):match("libclang_rt%.fuzzer") then
      why = "clang has no libFuzzer runtime"
      return built, why
    end
    error("make fuzz failed: " .. H.describe(r))
  end
  built = true
  return built
end

-- A directory holding the seed inputs (a list of strings); remove it with
-- H.rmtree.
function F.seeds_dir(seeds)
  local dir = H.tmpdir()
  for i, s in ipairs(seeds) do H.write_file(dir .. "/seed" .. i, s) end
  return dir
end

-- Run target NAME (build-fuzz/NAME) with args; opts as H.run's.
function F.run(name, args, opts)
  return H.run(H.root .. "/build-fuzz/" .. name, args, opts)
end

-- The inputs from seeds, then mutations of them, to `runs` inputs in all,
-- from a fixed seed of libFuzzer's own: the result of H.run. An input that
-- fails is kept in build-fuzz/artifacts/ (libFuzzer's stderr names it), not
-- in the directory the specs run in (the tree's root, where `git add -A`
-- would take it).
function F.fuzz(name, seeds, runs)
  local dir = F.seeds_dir(seeds)
  local art = H.root .. "/build-fuzz/artifacts"
  H.run("mkdir", { "-p", art })
  local r = F.run(name, { "-runs=" .. runs, "-seed=1", "-max_len=4096", "-rss_limit_mb=2048",
    "-timeout=20", "-artifact_prefix=" .. art .. "/" .. name .. "-", dir }, { timeout = 300 })
  H.rmtree(dir)
  return r
end

return F
