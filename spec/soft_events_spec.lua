-- soft_events_spec.lua - completion events of the soft device: an armed
-- CQ's fd turns readable for every completion that lands in it, also those
-- the device makes itself rather than a wire's result (the flushes of a QP
-- moved to ERR, a receive posted to a QP in ERR). A program that sleeps on
-- a completion channel waits for exactly these at teardown (rping's CQ
-- thread exits on the flush of its last receive); a CQ that stays quiet
-- hangs it.
local ffi = require("ffi")
local core = require("tbrt.ffi")
local V = require("verbs_helpers")

pcall(ffi.cdef, [[ struct pollfd { int fd; short events; short revents; }; ]])
pcall(ffi.cdef, [[ int poll(struct pollfd *fds, unsigned long nfds, int timeout); ]])
local C = ffi.C

-- Does fd turn readable within ms milliseconds?
local function readable(fd, ms)
  local p = ffi.new("struct pollfd[1]")
  p[0].fd, p[0].events = fd, 1
  return C.poll(p, 1, ms or 0) == 1
end

local function arm(cq) assert.equal(0, core.C.tbrt_cq_arm(cq.c)) end

describe("soft completion events", function()
  local p
  after_each(function() if p then V.close(p) p = nil end end)

  for _, pers in ipairs { "linux-rc", "apple-uc" } do
    it(pers .. ": moving a QP to ERR wakes its armed CQ with the flushes", function()
      p = V.pair{ personality = pers, type = pers == "linux-rc" and "RC" or "UC" }
      for i = 1, 3 do assert(p.b:post_recv{ mr = p.bmr, len = 4096, wr_id = i }) end
      arm(p.cq_b)
      assert.is_false(readable(p.cq_b.c.fd), "armed and nothing happened yet")
      assert(p.b:modify{ state = "ERR" })
      assert.is_true(readable(p.cq_b.c.fd, 1000), "no event for the flushed receives")
      assert.is_true(core.C.tbrt_cq_ack(p.cq_b.c) >= 1)
      local wcs = assert(p.cq_b:poll(8))
      assert.equal(3, #wcs)
      for i, w in ipairs(wcs) do
        assert.equal(i, w.wr_id)
        assert.equal("IBV_WC_WR_FLUSH_ERR", w.status)
      end
    end)
  end

  it("a receive posted to a QP in ERR wakes the armed CQ with its flush", function()
    p = V.pair{ personality = "linux-rc", type = "RC" }
    assert(p.b:modify{ state = "ERR" })
    assert.same({}, assert(p.cq_b:poll(8)))
    core.C.tbrt_cq_ack(p.cq_b.c)
    arm(p.cq_b)
    assert(p.b:post_recv{ mr = p.bmr, len = 64, wr_id = 9 })
    assert.is_true(readable(p.cq_b.c.fd, 1000), "no event for the flushed receive")
    local wcs = assert(p.cq_b:poll(8))
    assert.equal(1, #wcs)
    assert.equal(9, wcs[1].wr_id)
    assert.equal("IBV_WC_WR_FLUSH_ERR", wcs[1].status)
  end)

  it("an unarmed CQ stays quiet when it gets flushes", function()
    p = V.pair{ personality = "linux-rc", type = "RC" }
    assert(p.b:post_recv{ mr = p.bmr, len = 64, wr_id = 1 })
    assert(p.b:modify{ state = "ERR" })
    assert.is_false(readable(p.cq_b.c.fd, 50))
    assert.equal(1, #assert(p.cq_b:poll(8)))
  end)
end)
