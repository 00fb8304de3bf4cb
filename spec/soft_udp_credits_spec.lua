-- soft_udp_credits_spec.lua - RC flow control on the soft device's UDP wire
-- (loopback, wire = "udp" forced), counted from the wire's counters and a
-- capture, never timed:
--   - a lost last packet goes again by a tail probe, not the 67 ms timer,
--     and a lost NAK is said again to the probe that meets the gap;
--   - the probe after an RNR NAK asks for an ACK, so the window opens again
--     when the receive is there, not when the retransmit timer fires;
--   - every ACK carries the receives the responder has left (IBA 9.7.7.2
--     end-to-end credits: the AETH credit count, not "invalid"), so a
--     requester streaming into fewer receives than its window does not
--     send packets that RNR NAKs throw away.
local ffi = require("ffi")
local uv = require("luv")
local H = require("helpers")
local V = require("verbs_helpers")
local task = require("tbrt.task")

local function pair(o)
  o.personality, o.type, o.wire = "linux-rc", "RC", "udp"
  o.mr_len = o.mr_len or (1024 * 1024)
  return V.pair(o)
end

local fill, first_bad = V.fill, V.first_bad

local function have_tshark()
  return H.run("/bin/sh", { "-c", "command -v tshark" }).code == 0
end

describe("soft UDP wire RC flow control", function()
  local p
  after_each(function() if p then V.close(p) p = nil end end)

  it("opens the window after an RNR NAK by the probe's ACK, not the retransmit timer", function()
    -- timeout 14: 67 ms; the probe (the message's FIRST packet) used to go
    -- without AckReq, so the rest of the message waited for the timer
    p = pair{ mtu = 1024, min_rnr_timer = 1, rnr_retry = 7, timeout = 14 }
    fill(p.abuf, 0, 3000, 5)
    assert(p.a:post_send{ mr = p.amr, len = 3000, wr_id = 1 })
    assert.equal(0, #assert(p.cq_a:wait(1, 0.02)), "no receive: RNR NAKed")
    assert.is_true(p.dev:stats().rnr_naks_recv >= 1)
    assert(p.b:post_recv{ mr = p.bmr, len = 4096, wr_id = 2 })
    local r = assert(p.cq_b:wait(1, 5))
    assert.equal("IBV_WC_SUCCESS", r[1].status, r[1].why)
    assert.is_nil(first_bad(p.bbuf, 0, 3000, 5))
    assert.equal("IBV_WC_SUCCESS", assert(p.cq_a:wait(1, 5))[1].status)
    local st = p.dev:stats()
    assert.equal(0, st.timeouts, "the retransmit timer fired")
    assert.equal(0, st.retransmits)
  end)

  it("sends a lost last packet again by a tail probe, before the retransmit timer", function()
    p = pair{ mtu = 1024, timeout = 14 }    -- 67 ms a try
    assert(p.b:post_recv{ mr = p.bmr, len = 4096 })
    fill(p.abuf, 0, 3000, 9)
    assert(p.dev:faults{ drop_every = 3 })  -- the third packet: the message's LAST
    assert(p.a:post_send{ mr = p.amr, len = 3000 })
    local r = assert(p.cq_b:wait(1, 5))
    assert(p.dev:faults{})
    assert.equal("IBV_WC_SUCCESS", r[1].status, r[1].why)
    assert.is_nil(first_bad(p.bbuf, 0, 3000, 9))
    assert.equal("IBV_WC_SUCCESS", assert(p.cq_a:wait(1, 5))[1].status)
    local st = p.dev:stats()
    assert.is_true(st.drops_injected >= 1)
    assert.equal(0, st.timeouts, "the retransmit timer fired")
    assert.is_true(st.tail_probes >= 1, "the probe")
  end)

  it("says a lost NAK sequence error again when the tail probe meets the gap", function()
    -- a's 4th packet is lost (the 3-packet message's MIDDLE), and b's 3rd
    -- (the NAK sequence error for it, after the ACKs of two messages). The
    -- drops count packets: on a loaded machine an extra one (a tail probe
    -- of an earlier message, an ACK for a credit) can come first, and no
    -- gap is made (no NAK at all); then the scenario is set up again.
    local st
    for _ = 1, 5 do
      p = pair{ mtu = 1024, timeout = 14 }  -- 67 ms a try
      for i = 0, 7 do assert(p.b:post_recv{ mr = p.bmr, len = 4096, offset = i * 4096 }) end
      assert(p.dev:faults{ { qp = p.a.num, drop_every = 4 }, { qp = p.b.num, drop_every = 3 } })
      for m = 1, 3 do
        local n = m < 3 and 100 or 3000
        fill(p.abuf, 0, n, m)
        assert(p.a:post_send{ mr = p.amr, len = n })
        local r = assert(p.cq_b:wait(1, 5))
        assert.equal("IBV_WC_SUCCESS", r[1].status, r[1].why)
        assert.is_nil(first_bad(p.bbuf, (m - 1) * 4096, n, m), "message " .. m)
        assert.equal("IBV_WC_SUCCESS", assert(p.cq_a:wait(1, 5))[1].status)
      end
      assert(p.dev:faults{})
      st = p.dev:stats()
      if st.naks_sent > 0 then break end
      V.close(p)
      p = nil
    end
    assert.is_true(st.naks_sent >= 2, "NAKs sent: " .. st.naks_sent)
    assert.equal(0, st.timeouts, "the retransmit timer fired")
  end)

  it("streams 48 messages through 4 receives with RNR NAKs only before the first credits", function()
    p = pair{ mtu = 1024, min_rnr_timer = 1, rnr_retry = 7, depth = 64 }
    local n, msgs, recvs = 3000, 48, 4
    for i = 0, recvs - 1 do assert(p.b:post_recv{ mr = p.bmr, len = 4096, offset = i * 4096, wr_id = i }) end
    -- an ACK first: the requester learns the credits before the stream
    fill(p.abuf, 0, n, 1)
    assert(p.a:post_send{ mr = p.amr, len = n, wr_id = 100 })
    assert.equal("IBV_WC_SUCCESS", assert(p.cq_a:wait(1, 5))[1].status)
    local got = assert(p.cq_b:wait(1, 5))
    assert(p.b:post_recv{ mr = p.bmr, len = 4096, offset = got[1].wr_id * 4096, wr_id = got[1].wr_id })
    local before = p.dev:stats()
    -- (the clock of the reposts starts here: the stream goes out while it
    -- is posted, and no receive comes back until the loop below runs, so a
    -- slow post loop, ASan on a busy machine, is a slow repost too)
    local last = uv.hrtime()
    for m = 1, msgs do
      fill(p.abuf, m * 4096, n, m % 200 + 2)
      assert(p.a:post_send{ mr = p.amr, len = n, offset = m * 4096, wr_id = m })
    end
    -- the receiver reposts each receive as it has checked its message
    -- (slow: reposts that came 2 ms or more after the one before, as on a
    -- loaded machine: a SEND that waited 4 ms for credits goes anyway, and
    -- meets an RNR NAK every 10 us (min_rnr_timer 1) until the receive
    -- comes; each such gap allows that many more)
    local done, idle, slow, slow_allow = 0, 0, 0, 0
    while done < msgs do
      local got_b = assert(p.cq_b:wait(1, 0.1))
      idle = #got_b == 0 and idle + 1 or 0
      assert(idle < 50, string.format("stalled: %d of %d received", done, msgs))
      for _, c in ipairs(got_b) do
        assert.equal("IBV_WC_SUCCESS", c.status, c.why)
        done = done + 1
        local slot = tonumber(c.wr_id)
        assert.is_nil(first_bad(p.bbuf, slot * 4096, n, done % 200 + 2), "message " .. done)
        assert(p.b:post_recv{ mr = p.bmr, len = 4096, offset = slot * 4096, wr_id = slot })
        local now = uv.hrtime()
        if now - last >= 2e6 then
          slow = slow + 1
          slow_allow = slow_allow + 1 + math.ceil((now - last) / 10e3)
        end
        last = now
      end
    end
    local sent = 0
    for _ = 1, 50 do
      for _, c in ipairs(assert(p.cq_a:wait(msgs - sent, 0.1))) do
        assert.equal("IBV_WC_SUCCESS", c.status, c.why)
        sent = sent + 1
      end
      if sent == msgs then break end
    end
    assert.equal(msgs, sent)
    local st = p.dev:stats()
    -- without credits the requester sends the whole window each time the
    -- receives run out: ~30 RNR NAKs here, each throwing away what followed;
    -- with them only a SEND that waited 4 ms for credits (this thread
    -- descheduled that long on a loaded machine) goes to meet one
    local rnr = st.rnr_naks_recv - before.rnr_naks_recv
    local resent = st.rnr_resends - before.rnr_resends
    local allowed = msgs / 4 + slow_allow
    assert.is_true(rnr <= allowed, string.format("RNR NAKs in the stream: %d (%d reposts slow)",
      rnr, slow))
    assert.is_true(resent <= allowed * 3, "packets sent again after RNR NAKs: " .. resent)
    assert.equal(0, st.retransmits)
  end)

  it("says the receives left in every ACK's credit count (tshark)", function()
    if not have_tshark() then
      pending("tshark is not installed (Debian: tshark)")
      return
    end
    local file = os.tmpname()
    task.run(function()
      p = pair{ mtu = 1024, pcap = file }
      for i = 0, 4 do assert(p.b:post_recv{ mr = p.bmr, len = 4096, offset = i * 4096 }) end
      for m = 1, 3 do
        assert(p.a:post_send{ mr = p.amr, len = 100 })
        assert(p.cq_a:wait(1, 5)) ; assert(p.cq_b:wait(1, 5))
      end
      V.close(p) p = nil
    end)
    local port = os.getenv("TBRT_SOFT_UDP_PORT") or "4791"
    local r = H.run("tshark", { "-o", "infiniband.rroce.port:" .. port, "-r", file, "-Y",
      "infiniband.bth.opcode == 17", "-T", "fields", "-e", "infiniband.aeth.syndrome" },
      { timeout = 60 })
    os.remove(file)
    assert.equal(0, r.code, H.describe(r))
    -- 5 receives: after each message 4, 3, 2 left (IBA's codes 4, 3, 2).
    -- Both QPs are in this process: each ACK is captured as sent and as
    -- received; a tail probe on a loaded machine may draw one more ACK
    local syn = {}
    for v in r.stdout:gmatch("%S+") do
      v = tonumber(v)
      if v ~= syn[#syn] then syn[#syn + 1] = v end
    end
    assert.same({ 4, 3, 2 }, syn)
  end)
end)
