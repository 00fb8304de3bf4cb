-- soft_linux_spec.lua - the linux-rc personality of the soft device: RC/UC/UD,
-- RNR NAK retries, length errors, a vanished peer, RDMA WRITE/READ and the
-- queue pair state machine, each giving the status a real NIC gives.
local ffi = require("ffi")
local verbs = require("tbrt.verbs")
local V = require("verbs_helpers")
local link = require("tbrt.link")

local function linux(o)
  o = o or {}
  o.personality = "linux-rc"
  o.type = o.type or "RC"
  return V.pair(o)
end

describe("soft linux-rc", function()
  local p
  after_each(function() if p then V.close(p) p = nil end end)

  it("has one ACTIVE port with RoCE v1 and v2 GID entries", function()
    local dev = assert(verbs.open("soft0", { personality = "linux-rc" }))
    assert.equal(1, dev:query().phys_port_cnt)
    assert.equal("ACTIVE", dev:port(1).state)
    local types = {}
    for _, g in ipairs(dev:gids(1)) do
      if g.gid == V.LOOPBACK then types[#types + 1] = g.type end
    end
    assert.same({ "RoCEv1", "RoCEv2" }, types)
    dev:close()
  end)

  it("creates RC, UC and UD queue pairs", function()
    local dev = assert(verbs.open("soft0", { personality = "linux-rc" }))
    local pd, cq = dev:pd(), dev:cq(16)
    for _, t in ipairs { "RC", "UC", "UD" } do
      local qp = assert(pd:qp{ type = t, send_cq = cq, recv_cq = cq })
      assert(qp:destroy())
    end
    cq:destroy(); pd:free(); dev:close()
  end)

  it("accepts receives from INIT, not in RESET", function()
    p = linux{ connect = false }
    local ok, err = p.b:post_recv{ mr = p.bmr, len = 64 }
    assert.is_nil(ok)
    assert.matches("^EINVAL: .*is in RESET", err)
    assert(p.b:modify{ state = "INIT", port = 1, pkey_index = 0, access = verbs.ACCESS_ALL })
    assert(p.b:post_recv{ mr = p.bmr, len = 64 })
  end)

  it("enforces the transition table and names missing attributes", function()
    p = linux{ connect = false }
    local ok, err = p.a:modify{ state = "RTR", dest_qpn = p.b.num }
    assert.is_nil(ok)
    assert.matches("^EINVAL: .*RESET %-> RTR is not a valid transition", err)
    assert(p.a:modify{ state = "INIT", port = 1, pkey_index = 0, access = verbs.ACCESS_ALL })
    ok, err = p.a:modify{ state = "RTR", dest_qpn = p.b.num, rq_psn = 0 }
    assert.is_nil(ok)
    assert.matches("missing required attributes AV|PATH_MTU|MIN_RNR_TIMER|MAX_DEST_RD_ATOMIC", err, 1, true)
  end)

  it("retries an RNR NAK min_rnr_timer apart, rnr_retry times, then IBV_WC_RNR_RETRY_EXC_ERR", function()
    -- timer code 14 = 1.28 ms; 3 retries -> about 4 x 1.28 ms
    p = linux{ min_rnr_timer = 14, rnr_retry = 3 }
    local t0 = link.now()
    assert(p.a:post_send{ mr = p.amr, len = 64, wr_id = 5 })
    local wc = assert(p.cq_a:wait(1, 2))
    local dt = link.now() - t0
    assert.equal("IBV_WC_RNR_RETRY_EXC_ERR", wc[1].status)
    assert.equal(5, wc[1].wr_id)
    assert.is_true(dt >= 3 * 1.28e-3, "gave up after " .. dt .. " s")
    assert.is_true(dt < 0.5, "gave up after " .. dt .. " s")
    assert.equal("ERR", p.a:state())
  end)

  it("retries forever with rnr_retry 7 until a receive comes", function()
    p = linux{ min_rnr_timer = 1, rnr_retry = 7 }
    ffi.fill(p.abuf, 64, 0x33)
    assert(p.a:post_send{ mr = p.amr, len = 64, wr_id = 1 })
    assert.equal(0, #assert(p.cq_a:wait(1, 0.05)))
    assert(p.b:post_recv{ mr = p.bmr, len = 64, wr_id = 2 })
    assert.equal("IBV_WC_SUCCESS", assert(p.cq_a:wait(1))[1].status)
    local wc = assert(p.cq_b:wait(1))
    assert.equal("IBV_WC_SUCCESS", wc[1].status)
    assert.equal(0x33, p.bbuf[63])
  end)

  it("fails a receive smaller than the message: IBV_WC_LOC_LEN_ERR / IBV_WC_REM_INV_REQ_ERR", function()
    p = linux()
    assert(p.b:post_recv{ mr = p.bmr, len = 100, wr_id = 1 })
    assert(p.a:post_send{ mr = p.amr, len = 101, wr_id = 2 })
    local r = assert(p.cq_b:wait(1))
    assert.equal("IBV_WC_LOC_LEN_ERR", r[1].status)
    assert.matches("smaller than the message", r[1].why)
    local s = assert(p.cq_a:wait(1))
    assert.equal("IBV_WC_REM_INV_REQ_ERR", s[1].status)
    assert.equal("ERR", p.a:state())
  end)

  it("completes sends to a vanished peer with IBV_WC_RETRY_EXC_ERR after timeout x retry_cnt", function()
    -- timeout 10 = 4.19 ms per try, retry_cnt 2 -> 3 tries, about 12.6 ms
    p = linux{ timeout = 10, retry_cnt = 2 }
    assert(p.b:destroy())
    local t0 = link.now()
    assert(p.a:post_send{ mr = p.amr, len = 64, wr_id = 3 })
    local wc = assert(p.cq_a:wait(1, 2))
    local dt = link.now() - t0
    assert.equal("IBV_WC_RETRY_EXC_ERR", wc[1].status)
    assert.matches("peer queue pair is gone", wc[1].why)
    assert.is_true(dt >= 3 * 4.096e-6 * 2 ^ 10, "gave up after " .. dt .. " s")
    assert.is_true(dt < 1, "gave up after " .. dt .. " s")
  end)

  it("drops a UC message nobody posted a receive for", function()
    p = linux{ type = "UC" }
    assert(p.a:post_send{ mr = p.amr, len = 64, wr_id = 1 })
    assert.equal("IBV_WC_SUCCESS", assert(p.cq_a:wait(1))[1].status)
    assert(p.b:post_recv{ mr = p.bmr, len = 64, wr_id = 2 })
    assert.equal(0, #assert(p.cq_b:wait(1, 0.02)), "the dropped message never arrives")
  end)

  it("does RDMA WRITE (with immediate) and READ, and refuses a bad rkey", function()
    p = linux()
    for i = 0, 255 do p.abuf[i] = i end
    assert(p.b:post_recv{ mr = p.bmr, len = 0, wr_id = 11 })
    assert(p.a:post_send{ mr = p.amr, len = 256, opcode = "RDMA_WRITE_WITH_IMM", imm = 0x1234,
      rkey = p.bmr.rkey, raddr = p.bmr.addr + 1000 })
    local r = assert(p.cq_b:wait(1))
    assert.equal("RECV_RDMA_WITH_IMM", r[1].opcode)
    assert.equal(0x1234, r[1].imm)
    assert.equal(255, p.bbuf[1255])
    ffi.fill(p.abuf, 256, 0)
    assert(p.a:post_send{ mr = p.amr, len = 256, opcode = "RDMA_READ", rkey = p.bmr.rkey,
      raddr = p.bmr.addr + 1000 })
    assert.equal(2, #assert(p.cq_a:wait(2)))
    assert.equal(200, p.abuf[200])
    assert(p.a:post_send{ mr = p.amr, len = 16, opcode = "RDMA_WRITE", rkey = p.bmr.rkey + 1,
      raddr = p.bmr.addr })
    local s = assert(p.cq_a:wait(1))
    assert.equal("IBV_WC_REM_ACCESS_ERR", s[1].status)
  end)

  it("delivers UD datagrams with a GRH (IPv4 form between IPv4 GIDs) and drops a wrong qkey", function()
    local dev = assert(verbs.open("soft0", { personality = "linux-rc" }))
    local pd, cq = dev:pd(), dev:cq(16)
    local a = assert(pd:qp{ type = "UD", send_cq = cq, recv_cq = cq })
    local b = assert(pd:qp{ type = "UD", send_cq = cq, recv_cq = cq })
    for _, q in ipairs { a, b } do
      assert(q:modify{ state = "INIT", port = 1, pkey_index = 0, qkey = 0x11 })
      assert(q:modify{ state = "RTR" })
      assert(q:modify{ state = "RTS", sq_psn = 0 })
    end
    local buf = ffi.new("uint8_t[4096]")
    local mr = assert(pd:reg(buf, 4096))
    ffi.copy(buf, "hello ud")
    assert(b:post_recv{ mr = mr, offset = 1024, len = 1024, wr_id = 1 })
    local ah = assert(dev:ah{ pd = pd, dgid = V.LOOPBACK, sgid_index = V.loopback_gid(dev, 1) })
    assert(a:post_send{ mr = mr, len = 8, ah = ah, remote_qpn = b.num, remote_qkey = 0x12, wr_id = 1 })
    assert(a:post_send{ mr = mr, len = 8, ah = ah, remote_qpn = b.num, remote_qkey = 0x11, wr_id = 2 })
    local wcs = assert(cq:wait(3))
    local recv
    for _, w in ipairs(wcs) do if w.opcode == "RECV" then recv = w end end
    assert.equal(48, recv.byte_len)
    assert.equal(a.num, recv.src_qp)
    -- the RoCE packet type in sl, as mlx5 reports it (UCX's ud_verbs reads it
    -- to find the destination address in the GRH): 0xa, IPv4 over UDP
    assert.equal(0xa, recv.sl)
    assert.equal(1, recv.wc_flags)             -- IBV_WC_GRH alone
    assert.equal("hello ud", ffi.string(buf + 1024 + 40, 8))
    -- between IPv4 GIDs the GRH holds an IPv4 header in its last 20 bytes,
    -- as RoCE v2 NICs deliver it: zeros, then version 4, UDP, the addresses
    assert.equal(string.rep("\0", 20), ffi.string(buf + 1024, 20))
    assert.equal(0x45, buf[1044])
    assert.equal(17, buf[1044 + 9])
    assert.equal("\127\0\0\1\127\0\0\1", ffi.string(buf + 1044 + 12, 8))
    a:destroy(); b:destroy(); mr:dereg(); cq:destroy(); pd:free(); dev:close()
  end)

  -- a UD QP keeps the view of its last target (a lookup takes the fabric's
  -- lock and asks whether its process lives): each datagram must still go to
  -- the QP its send names, and none to a QP destroyed since
  it("sends each UD datagram to the QP it names, alternating targets, none to a destroyed one",
    function()
      local dev = assert(verbs.open("soft0", { personality = "linux-rc" }))
      local pd, scq, rcq = dev:pd(), dev:cq(64), dev:cq(64)
      local function ud()
        local q = assert(pd:qp{ type = "UD", send_cq = scq, recv_cq = rcq })
        assert(q:modify{ state = "INIT", port = 1, pkey_index = 0, qkey = 0x11 })
        assert(q:modify{ state = "RTR" })
        assert(q:modify{ state = "RTS", sq_psn = 0 })
        return q
      end
      local a, b, c = ud(), ud(), ud()
      local buf = ffi.new("uint8_t[65536]")
      local mr = assert(pd:reg(buf, 65536))
      local ah = assert(dev:ah{ pd = pd, dgid = V.LOOPBACK, sgid_index = V.loopback_gid(dev, 1) })
      local next_rx = 0
      local function post_rx(q, n)
        for _ = 1, n do
          next_rx = next_rx + 1
          assert(q:post_recv{ mr = mr, offset = 8192 + next_rx * 128, len = 128, wr_id = next_rx })
        end
      end
      post_rx(b, 4) ; post_rx(c, 4)
      -- one datagram: its text at offset 64*i of the buffer, sent to q
      local sent = 0
      local function send(q, text)
        sent = sent + 1
        ffi.copy(buf + 64 * sent, text)
        assert(a:post_send{ mr = mr, offset = 64 * sent, len = #text, ah = ah, remote_qpn = q.num,
          remote_qkey = 0x11, wr_id = sent })
        local s = assert(scq:wait(1, 3))
        assert.equal("IBV_WC_SUCCESS", s[1].status)
      end
      local function got(q, text)
        local w = assert(rcq:wait(1, 3))[1]
        assert.is_not_nil(w, "no datagram arrived for " .. text)
        assert.equal(q.num, w.qp_num)
        assert.equal(a.num, w.src_qp)
        assert.equal(text, ffi.string(buf + 8192 + w.wr_id * 128 + 40, #text))
      end
      for i = 1, 3 do
        send(b, "to b " .. i) ; got(b, "to b " .. i)
        send(c, "to c " .. i) ; got(c, "to c " .. i)
      end
      local cnum = c.num
      assert(c:destroy())
      -- a new QP, likely in the memory c's block was in, ready to receive
      local d = ud()
      post_rx(d, 2)
      -- the old target is gone: the datagram is lost (UD: the send
      -- succeeds), and does not land in the QP made since
      assert(a:post_send{ mr = mr, len = 8, ah = ah, remote_qpn = cnum, remote_qkey = 0x11,
        wr_id = 99 })
      assert.equal("IBV_WC_SUCCESS", assert(scq:wait(1, 3))[1].status)
      assert.same({}, rcq:poll(4))
      send(b, "b again") ; got(b, "b again")
      send(d, "to d") ; got(d, "to d")
      assert.same({}, rcq:poll(4))
      a:destroy(); b:destroy(); d:destroy(); mr:dereg(); scq:destroy(); rcq:destroy(); pd:free()
      dev:close()
    end)
end)
