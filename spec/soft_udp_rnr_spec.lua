-- soft_udp_rnr_spec.lua - RC after an RNR NAK on the soft device's UDP wire
-- (loopback, wire = "udp" forced), counted from the wire's counters, never
-- timed: the probe the requester sends after an RNR NAK asks for an ACK, so
-- the window opens again when the receive is there, not when the 67 ms
-- retransmit timer fires.
local V = require("verbs_helpers")

local function pair(o)
  o.personality, o.type, o.wire = "linux-rc", "RC", "udp"
  o.mr_len = o.mr_len or (1024 * 1024)
  return V.pair(o)
end

local function fill(buf, off, n, seed)
  for i = 0, n - 1 do buf[off + i] = (i * 7 + seed) % 251 end
end

local function first_bad(buf, off, n, seed)
  for i = 0, n - 1 do
    if buf[off + i] ~= (i * 7 + seed) % 251 then return i end
  end
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
end)
