-- soft_srq_spec.lua - shared receive queues of the soft device: QPs made with
-- one take its receives oldest first, whichever QP a message arrives at, the
-- completion names the QP that received it (in that QP's CQ), the limit
-- event comes once when fewer receives wait than armed, a QP of the SRQ that
-- goes to ERR reports its last WQE, and what verbs forbid is refused with a
-- message (posting to the QP, destroying an SRQ in use, growing it past its
-- slots). All of it on both wires: shared memory, and UDP (RoCEv2 on
-- loopback), where a message of many packets holds the receive it took from
-- its first packet to its last.
local ffi = require("ffi")
local verbs = require("tbrt.verbs")
local core = require("tbrt.ffi")
local V = require("verbs_helpers")

pcall(ffi.cdef, [[ struct pollfd { int fd; short events; short revents; }; ]])
pcall(ffi.cdef, [[ int poll(struct pollfd *fds, unsigned long nfds, int timeout); ]])

local function readable(fd, ms)
  local p = ffi.new("struct pollfd[1]")
  p[0].fd, p[0].events = fd, 1
  return ffi.C.poll(p, 1, ms or 0) == 1
end

-- Two senders a1, a2 connected to b1, b2, which share one SRQ; b1 and b2
-- have CQs of their own (cq_b1, cq_b2), so each completion's CQ shows whose
-- it is. o.type: RC (default) or UC; o.wire.
local function srq_setup(o)
  o = o or {}
  local dev = assert(verbs.open("soft0", { personality = "linux-rc", wire = o.wire }))
  local pd = assert(dev:pd())
  local cq_a, cq_b1, cq_b2 = assert(dev:cq(64)), assert(dev:cq(64)), assert(dev:cq(64))
  local srq = assert(pd:srq{ max_wr = o.max_wr or 16, max_sge = 1 })
  local t = o.type or "RC"
  local a1 = assert(pd:qp{ type = t, send_cq = cq_a, recv_cq = cq_a })
  local a2 = assert(pd:qp{ type = t, send_cq = cq_a, recv_cq = cq_a })
  local b1 = assert(pd:qp{ type = t, send_cq = cq_b1, recv_cq = cq_b1, srq = srq })
  local b2 = assert(pd:qp{ type = t, send_cq = cq_b2, recv_cq = cq_b2, srq = srq })
  local len = 65536
  local sbuf, rbuf = ffi.new("uint8_t[?]", len), ffi.new("uint8_t[?]", len)
  local smr, rmr = assert(pd:reg(sbuf, len)), assert(pd:reg(rbuf, len))
  local copt = { port = 1, dgid = V.LOOPBACK, sgid_index = V.loopback_gid(dev, 1),
    min_rnr_timer = 1, rnr_retry = 7 }
  assert(verbs.connect(a1, b1, copt))
  assert(verbs.connect(a2, b2, copt))
  local s = { dev = dev, pd = pd, cq_a = cq_a, cq_b1 = cq_b1, cq_b2 = cq_b2, srq = srq, a1 = a1,
    a2 = a2, b1 = b1, b2 = b2, sbuf = sbuf, rbuf = rbuf, smr = smr, rmr = rmr }
  function s.close()
    for _, q in ipairs { a1, a2, b1, b2 } do if q.q then q:destroy() end end
    if srq.s then srq:destroy() end
    smr:dereg(); rmr:dereg()
    cq_a:destroy(); cq_b1:destroy(); cq_b2:destroy()
    pd:free(); dev:close()
  end
  return s
end

for _, wire in ipairs { "shm", "udp" } do
describe("soft shared receive queues (" .. wire .. " wire)", function()
  local s
  local function setup(o)
    o = o or {}
    o.wire = wire
    return srq_setup(o)
  end
  after_each(function() if s then s.close() s = nil end end)

  it("the device says it has them", function()
    local dev = assert(verbs.open("soft0", { personality = "linux-rc", wire = wire }))
    local a = dev:query()
    assert.is_true(a.max_srq >= 1)
    assert.is_true(a.max_srq_wr >= 4096)
    assert.equal(30, a.max_srq_sge)
    dev:close()
  end)

  for _, t in ipairs { "RC", "UC" } do
    it(t .. ": receives are taken oldest first by whichever QP a message arrives at, " ..
      "each completion in the receiving QP's CQ", function()
      s = setup{ type = t }
      for i = 1, 4 do
        assert(s.srq:post_recv{ mr = s.rmr, offset = (i - 1) * 1024, len = 1024, wr_id = 100 + i })
      end
      ffi.copy(s.sbuf, "to b2")
      assert(s.a2:post_send{ mr = s.smr, len = 5, wr_id = 1 })
      ffi.copy(s.sbuf + 16, "to b1!")
      assert(s.a1:post_send{ mr = s.smr, offset = 16, len = 6, wr_id = 2 })
      assert(s.a2:post_send{ mr = s.smr, len = 5, wr_id = 3 })
      local w2 = assert(s.cq_b2:wait(2, 2))
      local w1 = assert(s.cq_b1:wait(1, 2))
      assert.equal(2, #w2)
      assert.equal(1, #w1)
      -- the SRQ's receives in posting order: 101 to b2, 102 to b1, 103 to b2
      assert.same({ 101, 103 }, { w2[1].wr_id, w2[2].wr_id })
      assert.equal(102, w1[1].wr_id)
      assert.equal(s.b2.num, w2[1].qp_num)
      assert.equal(s.b1.num, w1[1].qp_num)
      assert.equal(5, w2[1].byte_len)
      assert.equal(6, w1[1].byte_len)
      assert.equal("to b2", ffi.string(s.rbuf, 5))
      assert.equal("to b1!", ffi.string(s.rbuf + 1024, 6))
      assert.equal("IBV_WC_SUCCESS", w1[1].status)
    end)
  end

  it("an RC sender waits (RNR) until the SRQ has a receive, then it is delivered", function()
    s = setup()
    assert(s.a1:post_send{ mr = s.smr, len = 8, wr_id = 7 })
    assert.same({}, assert(s.cq_b1:poll(4)))
    assert(s.srq:post_recv{ mr = s.rmr, len = 64, wr_id = 70 })
    local w = assert(s.cq_b1:wait(1, 2))
    assert.equal(70, w[1].wr_id)
    local a = assert(s.cq_a:wait(1, 2))
    assert.equal("IBV_WC_SUCCESS", a[1].status)
  end)

  it("the limit event comes once, when fewer receives wait than armed, and disarms it", function()
    s = setup()
    for i = 1, 4 do assert(s.srq:post_recv{ mr = s.rmr, len = 64, wr_id = i }) end
    assert(s.srq:modify{ limit = 3 })
    assert.equal(3, s.srq:query().limit)
    local fd = assert(s.dev:event_fd())
    assert.is_nil(s.dev:event())                  -- 4 wait: not below 3
    assert.is_false(readable(fd, 0), "the event fd is quiet while nothing happened")
    assert(s.a1:post_send{ mr = s.smr, len = 8 })   -- 3 wait: not below 3 either
    assert(s.cq_b1:wait(1, 2))
    assert.is_nil(s.dev:event())
    assert(s.a2:post_send{ mr = s.smr, len = 8 })   -- 2 wait: below the limit
    assert(s.cq_b2:wait(1, 2))
    assert.is_true(readable(fd, 1000), "no wake-up for the limit")
    local ev = s.dev:event()
    assert(ev, "no SRQ_LIMIT_REACHED")
    assert.equal("SRQ_LIMIT_REACHED", ev.type)
    assert.equal(s.srq.num, ev.num)
    assert.equal(0, s.srq:query().limit)        -- disarmed
    assert(s.a1:post_send{ mr = s.smr, len = 8 })
    assert(s.cq_b1:wait(1, 2))
    assert.is_nil(s.dev:event())                -- once
  end)

  it("the limit wakes the event fd by itself, while the owner only waits on it", function()
    s = setup()
    for i = 1, 2 do assert(s.srq:post_recv{ mr = s.rmr, len = 64, wr_id = i }) end
    assert(s.srq:modify{ limit = 2 })
    local fd = assert(s.dev:event_fd())
    assert.is_nil(s.dev:event())
    assert(s.a1:post_send{ mr = s.smr, len = 8 })   -- 1 waits: below the limit
    -- nothing more is asked of the device: the wire must wake the fd
    assert.is_true(readable(fd, 2000), "no wake-up for the limit")
    local ev = s.dev:event()
    assert(ev and ev.type == "SRQ_LIMIT_REACHED", "no SRQ_LIMIT_REACHED")
  end)

  it("arming a limit above what waits reports it at once", function()
    s = setup()
    assert(s.srq:post_recv{ mr = s.rmr, len = 64 })
    assert(s.srq:modify{ limit = 5 })
    local ev = s.dev:event()
    assert(ev and ev.type == "SRQ_LIMIT_REACHED", "no event")
  end)

  it("a QP of the SRQ that goes to ERR reports QP_LAST_WQE_REACHED; the SRQ's receives stay", function()
    s = setup()
    for i = 1, 2 do assert(s.srq:post_recv{ mr = s.rmr, len = 64, wr_id = i }) end
    assert(s.b1:modify{ state = "ERR" })
    local ev = s.dev:event()
    assert(ev, "no event")
    assert.equal("QP_LAST_WQE_REACHED", ev.type)
    assert.equal(s.b1.num, ev.num)
    assert.same({}, assert(s.cq_b1:poll(4)))      -- nothing of the SRQ's is flushed
    assert(s.a2:post_send{ mr = s.smr, len = 8 })
    local w = assert(s.cq_b2:wait(1, 2))
    assert.equal(1, w[1].wr_id)
  end)

  it("refuses posting to its QPs, destroying it in use, and growing it past its slots", function()
    s = setup{ max_wr = 10 }
    local ok, err = s.b1:post_recv{ mr = s.rmr, len = 64 }
    assert.is_nil(ok)
    assert.matches("^EINVAL: .*takes its receives from SRQ", err)
    ok, err = s.srq:destroy()
    assert.is_nil(ok)
    assert.matches("^EBUSY: .*2 queue pairs still use SRQ", err)
    assert(s.srq:modify{ max_wr = 20 })          -- within the 32 slots it has
    assert.equal(20, s.srq:query().max_wr)
    ok, err = s.srq:modify{ max_wr = 33 }
    assert.is_nil(ok)
    assert.matches("^EINVAL: .*max_wr 33 out of range 1%.%.32", err)
    for i = 1, 20 do assert(s.srq:post_recv{ mr = s.rmr, len = 64, wr_id = i }) end
    ok, err = s.srq:post_recv{ mr = s.rmr, len = 64 }
    assert.is_nil(ok)
    assert.matches("^ENOMEM: .*full %(20 work requests%)", err)
  end)

  it("a QP made with no receive queue (max_recv_wr 0) refuses receives", function()
    local dev = assert(verbs.open("soft0", { personality = "linux-rc", wire = wire }))
    local pd, cq = assert(dev:pd()), assert(dev:cq(8))
    local qp = assert(pd:qp{ type = "RC", send_cq = cq, recv_wr = 0 })
    assert.equal(0, qp.q.cap.max_recv_wr)
    assert(qp:modify{ state = "INIT", port = 1, pkey_index = 0, access = verbs.ACCESS_ALL })
    local buf = ffi.new("uint8_t[64]")
    local mr = assert(pd:reg(buf, 64))
    local ok, err = qp:post_recv{ mr = mr, len = 64 }
    assert.is_nil(ok)
    assert.matches("^ENOMEM: .*receive queue full %(0 of 0", err)
    qp:destroy(); mr:dereg(); cq:destroy(); pd:free(); dev:close()
  end)

  it("completion fds wake for SRQ receives as for a QP's own", function()
    s = setup()
    assert(s.srq:post_recv{ mr = s.rmr, len = 64 })
    assert.equal(0, core.C.tbrt_cq_arm(s.cq_b2.c))
    assert(s.a2:post_send{ mr = s.smr, len = 8 })
    assert.is_true(readable(s.cq_b2.c.fd, 1000))
  end)
end)
end
