-- tcp_busy_poll_spec.lua - a tcp link busy-polls its socket only when asked
-- (opts.spin set, or settimeouts' spin): by default a waiter sleeps in
-- poll() at once, as the kernel wakes a tcp reader as fast as spinning
-- would; RDMA links spin 50 us by default. Seen in the CPU time a bounded
-- wait for bytes that never come burns: a spinning wait burns what the
-- scheduler gives it (all of a CPU on an idle machine, a share of one on a
-- loaded CI runner), a sleeping one next to nothing; so the two are
-- compared with each other, not with the wait's 0.3 s.
local ffi = require("ffi")
local core = require("tbrt.ffi")
local L = require("links")

local C = core.C

ffi.cdef [[
  struct tbrt_rusage_tv { long tv_sec; long tv_usec; };
  struct tbrt_rusage { struct tbrt_rusage_tv ru_utime, ru_stime; long rest[14]; };
  int getrusage(int who, struct tbrt_rusage *usage);
]]

local function cpu_seconds()
  local u = ffi.new("struct tbrt_rusage")
  assert(ffi.C.getrusage(0, u) == 0)
  return tonumber(u.ru_utime.tv_sec) + tonumber(u.ru_utime.tv_usec) * 1e-6 +
    tonumber(u.ru_stime.tv_sec) + tonumber(u.ru_stime.tv_usec) * 1e-6
end

-- CPU seconds a 0.3 s C recv_all on an idle link burns (it times out)
local function burn(l)
  local buf = ffi.new("uint8_t[1]")
  local t0 = cpu_seconds()
  assert.equal(-110, tonumber(C.tbrt_link_recv_all(l._l, buf, 1, 0.3)))   -- ETIMEDOUT
  return cpu_seconds() - t0
end

-- A wait that spun burned CPU (20 ms at least, a fifteenth of the 0.3 s:
-- a CPU shared with a dozen busy processes still gives that) and ten times
-- what one that slept did.
local function spun_vs_slept(spun, slept)
  local d = string.format("spinning wait: %.3f s of CPU, sleeping wait: %.3f s", spun, slept)
  assert.is_true(spun > 0.02, d)
  assert.is_true(spun > 10 * slept, d)
end

describe("a tcp link's waiters", function()
  it("sleep at once by default, and busy-poll for opts.spin when it is set", L.async(function()
    local a, b = L.pair({ device = "tcp" })
    local slept = burn(a)
    a:close() ; b:close()
    a, b = L.pair({ device = "tcp", spin = 10 })
    spun_vs_slept(burn(a), slept)
    a:close() ; b:close()
  end))

  it("busy-poll after settimeouts gives one, and stop when it is 0 again", L.async(function()
    local a, b = L.pair({ device = "tcp" })
    a:settimeouts(nil, nil, 10)
    local spun = burn(a)
    a:settimeouts(nil, nil, 0)
    spun_vs_slept(spun, burn(a))
    a:close() ; b:close()
  end))
end)
