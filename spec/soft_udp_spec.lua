-- soft_udp_spec.lua - the soft device's UDP wire on loopback (wire = "udp"
-- forced; both queue pairs in this process share the endpoint): RoCEv2
-- segmentation by path MTU with every opcode shape, PSNs, ACKs, go-back-N
-- under injected loss, reordering and duplicates, RNR NAKs, the retransmit
-- timer to IBV_WC_RETRY_EXC_ERR, READ/WRITE/immediate, UC losing the rest
-- of a message, UD with its GRH and Q_Key, the ICRC discarding corrupted
-- packets, and the counters that say what happened.
local ffi = require("ffi")
local verbs = require("tbrt.verbs")
local V = require("verbs_helpers")
local link = require("tbrt.link")
local H = require("helpers")

local function pair(o)
  o.personality = o.personality or "linux-rc"
  o.type = o.type or "RC"
  o.wire = "udp"
  o.mr_len = o.mr_len or (1024 * 1024 + 4096)   -- a 1 MiB message and room past it
  return V.pair(o)
end

local function fill(buf, n, seed) V.fill(buf, 0, n, seed) end
local first_bad = V.first_bad

-- Send one message of n bytes from a to b and check it arrived whole.
local function roundtrip(p, n, seed, opts)
  opts = opts or {}
  assert(n + 16 <= p.len, "the spec's buffers hold the message and 16 bytes past it")
  fill(p.abuf, n, seed)
  ffi.fill(p.bbuf, n + 16, 0)
  assert(p.b:post_recv{ mr = p.bmr, len = n + 16, wr_id = seed })
  assert(p.a:post_send{ mr = p.amr, len = n, wr_id = seed, opcode = opts.opcode, imm = opts.imm })
  local r = assert(p.cq_b:wait(1, opts.timeout or 5))
  assert.equal(1, #r, "no receive completion for " .. n .. " bytes")
  assert.equal("IBV_WC_SUCCESS", r[1].status, r[1].why)
  assert.equal(n, tonumber(r[1].byte_len))
  assert.is_nil(first_bad(p.bbuf, 0, n, seed), n .. " bytes: a wrong byte")
  local s = assert(p.cq_a:wait(1, opts.timeout or 5))
  assert.equal("IBV_WC_SUCCESS", s[1].status, s[1].why)
  return r[1]
end

describe("soft UDP wire (loopback)", function()
  local p
  after_each(function() if p then V.close(p) p = nil end end)

  it("cuts RC messages by every path MTU, 256 .. 4096, with and without immediate", function()
    for _, mtu in ipairs { 256, 512, 1024, 2048, 4096 } do
      p = pair{ mtu = mtu }
      for _, n in ipairs { 0, 1, mtu - 1, mtu, mtu + 1, 3 * mtu, 3 * mtu + 5 } do
        local r = roundtrip(p, n, n % 200 + 1)
        assert.is_nil(r.imm, "no immediate")
        r = roundtrip(p, n, n % 200 + 2, { opcode = "SEND_WITH_IMM", imm = 0x01020304 })
        assert.equal(0x01020304, r.imm)
      end
      local st = p.dev:stats()
      assert.is_true(st.pkts_sent > 0 and st.acks_sent > 0 and st.acks_recv > 0)
      assert.equal(0, st.icrc_failures)
      assert.equal(0, st.retransmits, "no loss, no retransmits")
      V.close(p) p = nil
    end
  end)

  it("moves 1 MiB whole across 1% drop, reordering and duplicates (retransmits > 0)", function()
    p = pair{ mtu = 1024, timeout = 8, retry_cnt = 7 }
    assert(p.dev:faults{ drop = 0.01, reorder = 0.02, duplicate = 0.02, seed = 7 })
    for i = 1, 4 do roundtrip(p, 1024 * 1024, i, { timeout = 20 }) end
    local st = p.dev:stats()
    assert.is_true(st.retransmits > 0, "retransmits: " .. st.retransmits)
    assert.is_true(st.drops_injected > 0 and st.dups_injected > 0 and st.reordered_injected > 0)
    assert.is_true(st.duplicates > 0, "the responder met duplicates")
    assert.is_true(st.naks_sent > 0 and st.naks_recv > 0, "NAK sequence errors")
  end)

  it("discards corrupted packets by their ICRC and recovers", function()
    p = pair{ mtu = 1024, timeout = 8 }
    assert(p.dev:faults{ corrupt = 0.05, seed = 3 })
    roundtrip(p, 200 * 1024, 9, { timeout = 20 })
    local st = p.dev:stats()
    assert.is_true(st.corrupt_injected > 0)
    assert.is_true(st.icrc_failures > 0, "the ICRC check found them")
    assert.is_true(st.retransmits > 0)
  end)

  it("says which packets it dropped for their ICRC when TBRT_UDP_DEBUG=1", function()
    -- the same corrupted stream in a process of its own: the flag is read
    -- once, when the process makes its first UDP wire
    local child = table.concat({
      "package.path = " .. string.format("%q", H.root .. "/spec/support/?.lua;") .. " .. package.path",
      "local V = require('verbs_helpers')",
      "local p = V.pair{ personality = 'linux-rc', type = 'RC', wire = 'udp', mtu = 1024,",
      "  timeout = 8, mr_len = 256 * 1024 }",
      "assert(p.dev:faults{ corrupt = 0.05, seed = 3 })",
      "V.fill(p.abuf, 0, 200 * 1024, 9)",
      "assert(p.b:post_recv{ mr = p.bmr, len = 200 * 1024, wr_id = 1 })",
      "assert(p.a:post_send{ mr = p.amr, len = 200 * 1024, wr_id = 2 })",
      "local r = assert(p.cq_b:wait(1, 20))",
      "assert(V.first_bad(p.bbuf, 0, 200 * 1024, 9) == nil, 'a wrong byte')",
      "print('received', r[1].status, 'icrc_failures', p.dev:stats().icrc_failures)",
      "V.close(p)" }, "\n")
    local r = H.run_tbrt({ "-" }, { stdin = child, env = { TBRT_UDP_DEBUG = "1" }, timeout = 30 })
    assert.equal(0, r.code, H.describe(r))
    local n = tonumber(r.stdout:match("received%s+IBV_WC_SUCCESS%s+icrc_failures%s+(%d+)"))
    assert.is_true(n and n > 0, H.describe(r))
    -- one line a dropped packet, naming its opcode, size, QP and both ends
    local lines = 0
    for line in r.stderr:gmatch("[^\n]+") do
      if line:find("ICRC mismatch", 1, true) then
        lines = lines + 1
        assert.truthy(line:match("^tbrt udp: ICRC mismatch, dropped: opcode 0x%x+, %d+ bytes, " ..
          "for QP 0x%x+, from 127%.0%.0%.1 port %d+ to 127%.0%.0%.1 port %d+$"), line)
      end
    end
    assert.equal(n, lines, r.stderr)
  end)

  it("delays by the faults' time and paces by their rate", function()
    p = pair{ mtu = 4096 }
    assert(p.dev:faults{ delay = "20ms", jitter = "2ms", distribution = "normal" })
    local t0 = link.now()
    roundtrip(p, 8, 1)
    local dt = link.now() - t0
    assert.is_true(dt >= 0.02, "a 20 ms delay took " .. dt)
    assert(p.dev:faults{ rate = "80mbit" })     -- 10 MB/s
    t0 = link.now()
    roundtrip(p, 512 * 1024, 2)
    dt = link.now() - t0
    assert.is_true(dt >= 0.04, "512 KiB at 10 MB/s took " .. dt)
  end)

  it("retries an RNR NAK min_rnr_timer apart, rnr_retry times, then IBV_WC_RNR_RETRY_EXC_ERR", function()
    p = pair{ min_rnr_timer = 14, rnr_retry = 3 }
    local t0 = link.now()
    assert(p.a:post_send{ mr = p.amr, len = 64, wr_id = 5 })
    local wc = assert(p.cq_a:wait(1, 3))
    local dt = link.now() - t0
    assert.equal("IBV_WC_RNR_RETRY_EXC_ERR", wc[1].status)
    assert.is_true(dt >= 3 * 1.28e-3 and dt < 1, "gave up after " .. dt .. " s")
    assert.is_true(p.dev:stats().rnr_naks_recv >= 4)
    assert.equal("ERR", p.a:state())
  end)

  it("waits for ever with rnr_retry 7 until a receive comes", function()
    p = pair{ min_rnr_timer = 1, rnr_retry = 7 }
    fill(p.abuf, 64, 3)
    assert(p.a:post_send{ mr = p.amr, len = 64, wr_id = 1 })
    assert.equal(0, #assert(p.cq_a:wait(1, 0.05)))
    assert(p.b:post_recv{ mr = p.bmr, len = 64, wr_id = 2 })
    assert.equal("IBV_WC_SUCCESS", assert(p.cq_a:wait(1, 2))[1].status)
    assert.equal("IBV_WC_SUCCESS", assert(p.cq_b:wait(1, 2))[1].status)
    assert.is_nil(first_bad(p.bbuf, 0, 64, 3))
  end)

  it("gives IBV_WC_RETRY_EXC_ERR after timeout x (retry_cnt + 1) when nothing answers", function()
    -- timeout 10 = 4.19 ms per try, retry_cnt 2 -> 3 tries
    p = pair{ timeout = 10, retry_cnt = 2 }
    assert(p.b:destroy())
    local t0 = link.now()
    assert(p.a:post_send{ mr = p.amr, len = 64, wr_id = 3 })
    local wc = assert(p.cq_a:wait(1, 3))
    local dt = link.now() - t0
    assert.equal("IBV_WC_RETRY_EXC_ERR", wc[1].status)
    assert.is_true(dt >= 3 * 4.096e-6 * 2 ^ 10 and dt < 1, "gave up after " .. dt .. " s")
    assert.is_true(p.dev:stats().timeouts >= 3)
  end)

  it("does RDMA WRITE, WRITE with immediate and READ of several packets, and refuses a bad rkey", function()
    p = pair{ mtu = 512 }
    local n = 5000
    fill(p.abuf, n, 11)
    assert(p.a:post_send{ mr = p.amr, len = n, opcode = "RDMA_WRITE", rkey = p.bmr.rkey,
      raddr = p.bmr.addr + 100 })
    assert.equal("IBV_WC_SUCCESS", assert(p.cq_a:wait(1, 2))[1].status)
    assert.is_nil(first_bad(p.bbuf, 100, n, 11))
    assert(p.b:post_recv{ mr = p.bmr, len = 0, wr_id = 11 })
    fill(p.abuf, n, 12)
    assert(p.a:post_send{ mr = p.amr, len = n, opcode = "RDMA_WRITE_WITH_IMM", imm = 0x1234,
      rkey = p.bmr.rkey, raddr = p.bmr.addr + 100 })
    local r = assert(p.cq_b:wait(1, 2))
    assert.equal("RECV_RDMA_WITH_IMM", r[1].opcode)
    assert.equal(0x1234, r[1].imm)
    assert.equal(n, tonumber(r[1].byte_len))
    assert.is_nil(first_bad(p.bbuf, 100, n, 12))
    ffi.fill(p.abuf, n, 0)
    assert(p.a:post_send{ mr = p.amr, len = n, opcode = "RDMA_READ", rkey = p.bmr.rkey,
      raddr = p.bmr.addr + 100 })
    local s = assert(p.cq_a:wait(2, 2))
    assert.equal("IBV_WC_SUCCESS", s[#s].status)
    assert.is_nil(first_bad(p.abuf, 0, n, 12), "READ brought the bytes back")
    assert(p.a:post_send{ mr = p.amr, len = 16, opcode = "RDMA_WRITE", rkey = p.bmr.rkey + 1,
      raddr = p.bmr.addr })
    assert.equal("IBV_WC_REM_ACCESS_ERR", assert(p.cq_a:wait(1, 2))[1].status)
  end)

  it("reads across lost responses (go back to the missing one)", function()
    p = pair{ mtu = 1024, timeout = 8 }
    fill(p.bbuf, 256 * 1024, 21)
    assert(p.dev:faults{ drop = 0.02, seed = 5 })
    assert(p.a:post_send{ mr = p.amr, len = 256 * 1024, opcode = "RDMA_READ", rkey = p.bmr.rkey,
      raddr = p.bmr.addr })
    local s = assert(p.cq_a:wait(1, 20))
    assert.equal("IBV_WC_SUCCESS", s[1].status, s[1].why)
    for i = 0, 256 * 1024 - 1 do
      if p.abuf[i] ~= p.bbuf[i] then error("byte " .. i .. " of the READ is wrong") end
    end
    assert.is_true(p.dev:stats().retransmits > 0)
  end)

  it("fails a receive smaller than the message: IBV_WC_LOC_LEN_ERR / IBV_WC_REM_INV_REQ_ERR", function()
    p = pair{}
    assert(p.b:post_recv{ mr = p.bmr, len = 100, wr_id = 1 })
    assert(p.a:post_send{ mr = p.amr, len = 3000, wr_id = 2 })
    assert.equal("IBV_WC_LOC_LEN_ERR", assert(p.cq_b:wait(1, 2))[1].status)
    assert.equal("IBV_WC_REM_INV_REQ_ERR", assert(p.cq_a:wait(1, 2))[1].status)
  end)

  it("UC: a lost packet loses the rest of its message, never completes it, and the next arrives", function()
    p = pair{ type = "UC", mtu = 1024 }
    for i = 1, 3 do assert(p.b:post_recv{ mr = p.bmr, len = 8192, wr_id = i }) end
    -- the second packet of the first message is lost, nothing else
    assert(p.dev:faults{ drop_every = 2, seed = 1 })
    fill(p.abuf, 3000, 4)
    assert(p.a:post_send{ mr = p.amr, len = 3000, wr_id = 10 })
    assert.equal("IBV_WC_SUCCESS", assert(p.cq_a:wait(1, 2))[1].status, "UC never reports it")
    assert(p.dev:faults{})
    assert(p.a:post_send{ mr = p.amr, len = 3000, wr_id = 11 })
    assert.equal("IBV_WC_SUCCESS", assert(p.cq_a:wait(1, 2))[1].status)
    local r = assert(p.cq_b:wait(2, 0.2))
    assert.equal(1, #r, "only the whole message completes")
    assert.equal("IBV_WC_SUCCESS", r[1].status)
    assert.equal(1, r[1].wr_id, "into the receive the broken one left posted")
    assert.is_nil(first_bad(p.bbuf, 0, 3000, 4))
    assert.is_true(p.dev:stats().out_of_order > 0)
  end)

  it("UD: one packet each, the Q_Key checked, the 40-byte GRH first (IPv4 header in its last 20)", function()
    local dev = assert(verbs.open("soft0", { personality = "linux-rc", wire = "udp" }))
    local pd, cq = dev:pd(), dev:cq(16)
    local a = assert(pd:qp{ type = "UD", send_cq = cq, recv_cq = cq })
    local b = assert(pd:qp{ type = "UD", send_cq = cq, recv_cq = cq })
    for _, q in ipairs { a, b } do
      assert(q:modify{ state = "INIT", port = 1, pkey_index = 0, qkey = 0x11 })
      assert(q:modify{ state = "RTR" })
      assert(q:modify{ state = "RTS", sq_psn = 0 })
    end
    local buf = ffi.new("uint8_t[8192]")
    local mr = assert(pd:reg(buf, 8192))
    ffi.copy(buf, "hello ud")
    assert(b:post_recv{ mr = mr, offset = 1024, len = 1024, wr_id = 1 })
    local ah = assert(dev:ah{ pd = pd, dgid = V.LOOPBACK, sgid_index = V.loopback_gid(dev, 1) })
    assert(a:post_send{ mr = mr, len = 8, ah = ah, remote_qpn = b.num, remote_qkey = 0x12, wr_id = 1 })
    assert(a:post_send{ mr = mr, len = 8, ah = ah, remote_qpn = b.num, remote_qkey = 0x11, wr_id = 2,
      opcode = "SEND_WITH_IMM", imm = 77 })
    local recv
    for _ = 1, 20 do
      for _, w in ipairs(assert(cq:wait(1, 0.1))) do if w.opcode == "RECV" then recv = w end end
      if recv then break end
    end
    assert(recv, "no datagram")
    assert.equal(48, tonumber(recv.byte_len))
    assert.equal(a.num, recv.src_qp)
    assert.equal(77, recv.imm)
    assert.equal("hello ud", ffi.string(buf + 1024 + 40, 8))
    assert.equal(0, buf[1024], "RoCEv2 IPv4: the first 20 bytes are zero")
    assert.equal(0x45, buf[1024 + 20], "then the IPv4 header")
    assert.equal(17, buf[1024 + 29], "of a UDP packet")
    assert(a:post_send{ mr = mr, len = 5000, ah = ah, remote_qpn = b.num, remote_qkey = 0x11 })
    local big = assert(cq:wait(1, 1))
    assert.equal("IBV_WC_LOC_LEN_ERR", big[1].status, "a datagram is one packet")
    a:destroy(); b:destroy(); mr:dereg(); cq:destroy(); pd:free(); dev:close()
  end)

  it("apple-uc holds a SEND until the peer posts a receive, by credit packets", function()
    p = V.pair{ personality = "apple-uc", type = "UC", wire = "udp" }
    fill(p.abuf, 100, 5)
    assert(p.a:post_send{ mr = p.amr, len = 100, wr_id = 1 })
    assert.equal(0, #assert(p.cq_a:wait(1, 0.05)), "no receive at the peer: the SEND waits")
    assert(p.b:post_recv{ mr = p.bmr, len = 4096, wr_id = 2 })
    assert.equal("IBV_WC_SUCCESS", assert(p.cq_b:wait(1, 2))[1].status)
    assert.is_nil(first_bad(p.bbuf, 0, 100, 5))
    local st = p.dev:stats()
    assert.is_true(st.credits_sent > 0 and st.credits_recv > 0)
  end)

  it("refuses faults it cannot parse and names the wire in describe()", function()
    p = pair{}
    assert.matches("^udp %(RoCEv2 over UDP port %d+%)", p.dev:describe())
    local ok, err = p.dev:faults{ delay = 5 }
    assert.is_nil(ok)
    assert.matches("delay=5 is not a time with its unit", err, 1, true)
    assert.has_error(function() p.dev:faults{ lose = 0.1 } end)
    assert(p.dev:faults{ drop = 0.5, seed = 9 })
    assert.matches("faults drop=50%%,seed=9$", p.dev:describe())
  end)
end)
