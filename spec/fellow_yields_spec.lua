-- Waiters that share a CPU with another tbrt waiter yield it once their
-- spin finds nothing (core/engine/cpu_waiters.c): a ring of 4 spinning processes,
-- two pinned to each of two CPUs, each waiting on a peer on the other CPU.
-- Every member counts its yields (stats().fellow_yields); a member alone on
-- its CPU yields nothing; a table that is not ours to trust (another size)
-- turns the hint off without breaking anything. Each run has a private
-- directory of its own (TBRT_SHM_DIR), so other tbrt processes on the
-- machine do not count as fellows.
local cjson = require("cjson")
local uv = require("luv")
local H = require("helpers")
local task = require("tbrt.task")

local MEMBER = H.root .. "/spec/support/ring_member.lua"

local function cpus_allowed()
  local ffi = require("ffi")
  pcall(ffi.cdef, [[
    typedef struct { uint64_t bits[16]; } fellow_spec_set;
    int sched_getaffinity(int pid, size_t size, fellow_spec_set *mask);
  ]])
  local s = ffi.new("fellow_spec_set")
  assert(ffi.C.sched_getaffinity(0, ffi.sizeof(s), s) == 0)
  local list = {}
  for i = 0, 1023 do
    if bit.band(bit.rshift(s.bits[math.floor(i / 64)], i % 64), 1ULL) ~= 0 then
      list[#list + 1] = i
    end
  end
  return list
end

-- n members, member i pinned to cpus[i % #cpus + 1]; before = called with
-- the directory before they start. Returns the members' last lines. The
-- members' waiters look for 5 s before they sleep (the spin option): a
-- waiter that sleeps holds no CPU and yields nothing, and whether one
-- sleeps depends on how fast this build runs (the sanitizer's slept).
local function ring(n, rounds, cpus, before)
  local dir = H.tmpdir()
  if before then before(dir) end
  local env = { TBRT_SHM_DIR = dir }
  local results = task.run(function()
    local ts = {}
    for i = 0, n - 1 do
      ts[#ts + 1] = function()
        return H.run(H.tbrt, { MEMBER, tostring(i), tostring(n), tostring(rounds),
          tostring(cpus[i % #cpus + 1]), dir, "5" }, { env = env, timeout = 90 })
      end
    end
    return assert(task.all(ts, 120))
  end)
  H.rmtree(dir)
  local outs = {}
  for i, r in ipairs(results) do
    assert.equal(0, r.code, "member " .. (i - 1) .. ": " .. H.describe(r))
    outs[i] = cjson.decode((assert(r.stdout:match("({[^\n]*})%s*$"), H.describe(r))))
    assert.equal(rounds, outs[i].rounds)
  end
  return outs
end

local function yields(outs)
  local list, sum = {}, 0
  for i, o in ipairs(outs) do
    list[i] = o.fellow_yields
    sum = sum + o.fellow_yields
  end
  return sum, table.concat(list, " ")
end

describe("waiters sharing a CPU with another waiter", function()
  local cpus = cpus_allowed()
  local two = #cpus >= 2 and { cpus[1], cpus[2] }

  it("yield it to each other: a ring of 4 on 2 CPUs, every member yields", function()
    if not two then return pending("one CPU in the affinity mask: no ring across two CPUs") end
    local outs = ring(4, 300, two)
    for i, o in ipairs(outs) do
      assert.equal(two[(i - 1) % 2 + 1], o.cpu, "member " .. (i - 1) .. " left its CPU")
      assert.is_true(o.fellow_yields > 0, "member " .. (i - 1) .. " never yielded; all: " ..
        select(2, yields(outs)))
    end
  end)

  it("alone on its CPU, spin: a ring of 2 on 2 CPUs yields nothing", function()
    if not two then return pending("one CPU in the affinity mask: no ring across two CPUs") end
    local sum, all = yields(ring(2, 300, two))
    assert.equal(0, sum, "yields: " .. all)
  end)

  it("without a table it can trust (another size), spin and still pass the token", function()
    if not two then return pending("one CPU in the affinity mask: no ring across two CPUs") end
    local outs = ring(4, 100, two, function(dir)
      local path = dir .. "/cpu-waiters-v1"
      H.write_file(path, string.rep("\255", 4096))
      uv.fs_chmod(path, tonumber("600", 8))
    end)
    local sum, all = yields(outs)
    assert.equal(0, sum, "yields: " .. all)
  end)
end)
