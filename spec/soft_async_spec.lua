-- soft_async_spec.lua - asynchronous events of the soft device (what
-- ibv_get_async_event delivers): a port another process takes down and up
-- (PORT_ERR, PORT_ACTIVE, and the event fd wakes for each), a CQ overrun
-- (CQ_ERR), the first receive of a QP still in RTR (COMM_EST), a peer's
-- RDMA WRITE with a bad rkey (QP_ACCESS_ERR at the responder, which a
-- sleeping responder is woken for); each names its object, and the fd is
-- quiet once there is nothing to take.
local ffi = require("ffi")
local verbs = require("tbrt.verbs")
local core = require("tbrt.ffi")
local V = require("verbs_helpers")
local E = require("soft_ends")

pcall(ffi.cdef, [[ struct pollfd { int fd; short events; short revents; }; ]])
pcall(ffi.cdef, [[ int poll(struct pollfd *fds, unsigned long nfds, int timeout); ]])

local function readable(fd, ms)
  local p = ffi.new("struct pollfd[1]")
  p[0].fd, p[0].events = fd, 1
  return ffi.C.poll(p, 1, ms or 0) == 1
end

-- All events there are now.
local function events(dev)
  local out = {}
  for _ = 1, 64 do
    local ev = dev:event()
    if not ev then break end
    out[#out + 1] = ev
  end
  return out
end

describe("soft asynchronous events", function()
  local p
  after_each(function() if p then V.close(p) p = nil end end)

  it("a port another process takes down and up: PORT_ERR, PORT_ACTIVE, the fd woken each time", function()
    local dev = assert(verbs.open("soft0", { personality = "linux-rc" }))
    local fd = assert(dev:event_fd())
    assert.same({}, events(dev))
    assert.is_false(readable(fd, 0), "quiet at first")
    local x = E.spawn()
    x:must{ op = "open", personality = "linux-rc", type = "RC" }
    x:must{ op = "set_port", port = 1, state = "down" }
    assert.is_true(readable(fd, 2000), "no wake-up for the port going down")
    local evs = events(dev)
    assert.equal(1, #evs)
    assert.equal("PORT_ERR", evs[1].type)
    assert.equal(1, evs[1].port)
    assert.is_false(readable(fd, 0), "quiet again")
    x:must{ op = "set_port", port = 1, state = "active" }
    assert.is_true(readable(fd, 2000), "no wake-up for the port coming back")
    evs = events(dev)
    assert.equal(1, #evs)
    assert.equal("PORT_ACTIVE", evs[1].type)
    E.close(x)
    dev:close()
  end)

  it("a CQ overrun: CQ_ERR naming the CQ", function()
    local dev = assert(verbs.open("soft0", { personality = "linux-rc" }))
    local pd, cq = assert(dev:pd()), assert(dev:cq(2))
    local qp = assert(pd:qp{ type = "RC", send_cq = cq, recv_wr = 8 })
    assert(qp:modify{ state = "INIT", port = 1, pkey_index = 0, access = verbs.ACCESS_ALL })
    local buf = ffi.new("uint8_t[64]")
    local mr = assert(pd:reg(buf, 64))
    for i = 1, 3 do assert(qp:post_recv{ mr = mr, len = 64, wr_id = i }) end
    assert(qp:modify{ state = "ERR" })      -- three flushes into a CQ of two
    local evs = events(dev)
    assert.equal(1, #evs)
    assert.equal("CQ_ERR", evs[1].type)
    assert.is_true(evs[1].cq == cq.c)
    local ok, err = cq:poll(4)
    assert.is_nil(ok)
    assert.matches("^EOVERFLOW", err)
    qp:destroy(); mr:dereg(); cq:destroy(); pd:free(); dev:close()
  end)

  it("the first receive of a QP still in RTR: COMM_EST, once", function()
    p = V.pair{ personality = "linux-rc", type = "RC", connect = false }
    local port, sgid = 1, V.loopback_gid(p.dev, 1)
    for _, q in ipairs { p.a, p.b } do
      assert(q:modify{ state = "INIT", port = port, pkey_index = 0, access = verbs.ACCESS_ALL })
    end
    local function rtr(q, peer)
      assert(q:modify{ state = "RTR", mtu = 1024, dest_qpn = peer.num, rq_psn = 0, dgid = V.LOOPBACK,
        sgid_index = sgid, ah_port = port, min_rnr_timer = 1, max_dest_rd_atomic = 1 })
    end
    rtr(p.a, p.b)
    rtr(p.b, p.a)
    assert(p.a:modify{ state = "RTS", sq_psn = 0, timeout = 14, retry_cnt = 7, rnr_retry = 7,
      max_rd_atomic = 1 })
    for i = 1, 2 do assert(p.b:post_recv{ mr = p.bmr, len = 64, wr_id = i }) end
    for i = 1, 2 do assert(p.a:post_send{ mr = p.amr, len = 8, wr_id = i }) end
    assert.equal(2, #assert(p.cq_b:wait(2, 2)))
    local evs = events(p.dev)
    assert.equal(1, #evs)
    assert.equal("COMM_EST", evs[1].type)
    assert.equal(p.b.num, evs[1].num)
  end)

  it("a peer's RDMA WRITE with a bad rkey: QP_ACCESS_ERR at the responder, woken while asleep", function()
    local b = E.spawn()
    b.qpn = b:must{ op = "open", personality = "linux-rc", type = "RC" }.qpn
    -- this process is the responder: a QP of its own facing end b
    local dev = assert(verbs.open("soft0", { personality = "linux-rc" }))
    local pd, cq = assert(dev:pd()), assert(dev:cq(8))
    local q = assert(pd:qp{ type = "RC", send_cq = cq })
    assert(q:modify{ state = "INIT", port = 1, pkey_index = 0, access = verbs.ACCESS_ALL })
    assert(q:modify{ state = "RTR", mtu = 1024, dest_qpn = b.qpn, rq_psn = 0, dgid = V.LOOPBACK,
      sgid_index = V.loopback_gid(dev, 1), ah_port = 1, min_rnr_timer = 1, max_dest_rd_atomic = 1 })
    assert(q:modify{ state = "RTS", sq_psn = 0, timeout = 14, retry_cnt = 7, rnr_retry = 7,
      max_rd_atomic = 1 })
    b:must{ op = "connect", qpn = q.num }
    local fd = assert(dev:event_fd())
    assert.same({}, events(dev))
    b:must{ op = "post_send", opcode = "RDMA_WRITE", rkey = 0x12345600, raddr = 4096, len = 8 }
    local r = b:must{ op = "poll", n = 1, timeout = 2 }
    assert.equal("IBV_WC_REM_ACCESS_ERR", r.wcs[1].status)
    -- we did not call in: the peer's mark woke our event fd
    assert.is_true(readable(fd, 2000), "the responder was not woken")
    local evs = events(dev)
    assert.equal(1, #evs)
    assert.equal("QP_ACCESS_ERR", evs[1].type)
    assert.equal(q.num, evs[1].num)
    assert.is_true(evs[1].qp == q.q)
    assert.equal("ERR", q:state())
    E.close(b)
    q:destroy(); cq:destroy(); pd:free(); dev:close()
  end)

  it("events of a destroyed QP are not handed out", function()
    p = V.pair{ personality = "linux-rc", type = "RC" }
    local srq_less = p.b
    assert(srq_less:modify{ state = "ERR" })
    -- an overrun's event for a CQ, then the CQ's QPs and the CQ go
    local dev = p.dev
    local cq = assert(dev:cq(1))
    local pd = p.pd
    local qp = assert(pd:qp{ type = "RC", send_cq = cq, recv_wr = 4 })
    assert(qp:modify{ state = "INIT", port = 1, pkey_index = 0, access = verbs.ACCESS_ALL })
    for i = 1, 2 do assert(qp:post_recv{ mr = p.bmr, len = 64, wr_id = i }) end
    assert(qp:modify{ state = "ERR" })
    assert(qp:destroy())
    assert(cq:destroy())
    assert.same({}, events(dev))
    assert.equal(0, core.C.tbrt_dev_event(dev.d, ffi.new("tbrt_event")))
  end)
end)
