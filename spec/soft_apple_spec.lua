-- soft_apple_spec.lua - the apple-uc personality of the soft device: every
-- rule of TN3205 (and what llama.cpp learned on real Macs), violated on
-- purpose, gives the status a real device gives.
local ffi = require("ffi")
local verbs = require("tbrt.verbs")
local V = require("verbs_helpers")

local FRAME = 4096

describe("soft apple-uc", function()
  local p
  after_each(function() if p then V.close(p) p = nil end end)

  it("has port 1 DOWN and port 2 ACTIVE, GIDs from this host's addresses, no GID types", function()
    local dev = assert(verbs.open("soft0", { personality = "apple-uc" }))
    assert.equal(2, dev:query().phys_port_cnt)
    assert.equal("DOWN", dev:port(1).state)
    assert.equal("ACTIVE", dev:port(2).state)
    local gids = dev:gids(2)
    assert.truthy(gids[1].text:match("^fe80:"), "index 0 is link-local")
    -- then the IPv4-mapped GIDs, 127.0.0.1 (the loopback's) after the others
    local lo = V.loopback_gid(dev, 2)
    assert.is_not_nil(lo, "127.0.0.1 has a GID")
    for _, g in ipairs(gids) do
      if g.index > 0 and g.index < lo then
        assert.truthy(g.text:match("^::ffff:"), "IPv4 before 127.0.0.1: " .. g.text)
      elseif g.index > lo and g.text:match("^::ffff:") then
        error("an IPv4 GID after 127.0.0.1: " .. g.text)
      end
    end
    assert.is_nil(gids[2].type, "the Apple provider reports no GID types")
    assert.equal(1, #dev:gids(1), "a DOWN port has only its link-local GID")
    dev:close()
  end)

  it("creates only UC queue pairs (RC and UD fail with EOPNOTSUPP)", function()
    local dev = assert(verbs.open("soft0", { personality = "apple-uc" }))
    local pd, cq = dev:pd(), dev:cq(16)
    for _, t in ipairs { "RC", "UD" } do
      local qp, err = pd:qp{ type = t, send_cq = cq, recv_cq = cq }
      assert.is_nil(qp)
      assert.matches("^EOPNOTSUPP: .*only has UC", err)
    end
    local qp = assert(pd:qp{ type = "UC", send_cq = cq, recv_cq = cq })
    qp:destroy(); cq:destroy(); pd:free(); dev:close()
  end)

  it("allows at most 10 queue pairs", function()
    local dev = assert(verbs.open("soft0", { personality = "apple-uc" }))
    local pd, cq = dev:pd(), dev:cq(16)
    local qps = {}
    for i = 1, 10 do qps[i] = assert(pd:qp{ type = "UC", send_cq = cq, recv_cq = cq }) end
    local qp, err = pd:qp{ type = "UC", send_cq = cq, recv_cq = cq }
    assert.is_nil(qp)
    assert.matches("^ENOMEM: .*at most 10 queue pairs", err)
    for _, q in ipairs(qps) do q:destroy() end
    cq:destroy(); pd:free(); dev:close()
  end)

  it("counts queue depth in 4 KiB frames, at most 4095", function()
    local dev = assert(verbs.open("soft0", { personality = "apple-uc" }))
    local pd, cq = dev:pd(), dev:cq(16)
    local qp, err = pd:qp{ type = "UC", send_cq = cq, recv_cq = cq, send_wr = 4096 }
    assert.is_nil(qp)
    assert.matches("^EINVAL: .*max_send_wr 4096 .*frames", err)
    qp = assert(pd:qp{ type = "UC", send_cq = cq, recv_cq = cq, send_wr = 4095, recv_wr = 40 })
    qp:destroy(); cq:destroy(); pd:free(); dev:close()
    -- a 40-frame receive queue holds one 128 KiB receive (32 frames), not two
    p = V.pair{ depth = 40 }
    assert(p.b:post_recv{ mr = p.bmr, len = 32 * FRAME, wr_id = 1 })
    local ok, perr = p.b:post_recv{ mr = p.bmr, offset = 32 * FRAME, len = 32 * FRAME, wr_id = 2 }
    assert.is_nil(ok)
    assert.matches("^ENOMEM: .*32 of 40 frames", perr)
    assert(p.b:post_recv{ mr = p.bmr, offset = 32 * FRAME, len = 8 * FRAME, wr_id = 3 })
  end)

  it("refuses messages over 16,773,120 bytes (4095 frames)", function()
    p = V.pair{ mr_len = 16773120 + FRAME, depth = 4095 }
    local ok, err = p.a:post_send{ mr = p.amr, len = 16773120 + 1 }
    assert.is_nil(ok)
    assert.matches("^EINVAL: .*16773121%-byte message exceeds the 16773120", err)
    assert(p.a:post_send{ mr = p.amr, len = 16773120 })
  end)

  it("needs LOCAL_WRITE|REMOTE_READ|REMOTE_WRITE on every region, at most 4 GiB", function()
    local dev = assert(verbs.open("soft0", { personality = "apple-uc" }))
    local pd = dev:pd()
    local buf = ffi.new("uint8_t[4096]")
    local mr, err = pd:reg(buf, 4096, verbs.LOCAL_WRITE)
    assert.is_nil(mr)
    assert.matches("^EINVAL: .*lacks LOCAL_WRITE|REMOTE_READ|REMOTE_WRITE", err)
    mr = assert(pd:reg(buf, 4096, verbs.ACCESS_ALL))
    assert(mr:dereg())
    -- 4 GiB + 4 KiB of address space, never touched
    ffi.cdef [[ void *mmap(void *, size_t, int, int, int, long); int munmap(void *, size_t); ]]
    local big = 4 * 1024 ^ 3 + 4096
    local mem = ffi.C.mmap(nil, big, 0, 0x22 --[[MAP_PRIVATE|MAP_ANONYMOUS]], -1, 0)
    mr, err = pd:reg(mem, big, verbs.ACCESS_ALL)
    assert.is_nil(mr)
    assert.matches("^EINVAL: .*exceeds the 4294967296%-byte limit", err)
    ffi.C.munmap(mem, big)
    pd:free(); dev:close()
  end)

  it("refuses receives before RTS", function()
    p = V.pair{ connect = false }
    assert(p.b:modify{ state = "INIT", port = 2, pkey_index = 0, access = verbs.ACCESS_ALL })
    local ok, err = p.b:post_recv{ mr = p.bmr, len = FRAME }
    assert.is_nil(ok)
    assert.matches("^EINVAL: .*in INIT; Apple's provider accepts receives only once the QP is RTS", err)
  end)

  it("fails the receive when SEND and RECV cover different numbers of frames", function()
    p = V.pair()
    assert(p.b:post_recv{ mr = p.bmr, len = 32 * FRAME, wr_id = 7 })
    assert(p.a:post_send{ mr = p.amr, len = 3 * FRAME, wr_id = 1 })
    local wc = assert(p.cq_b:wait(1))
    assert.equal("IBV_WC_LOC_LEN_ERR", wc[1].status)
    assert.equal(7, wc[1].wr_id)
    assert.matches("different numbers of 4 KiB frames", wc[1].why)
    -- the UC sender never hears of it
    local swc = assert(p.cq_a:wait(1))
    assert.equal("IBV_WC_SUCCESS", swc[1].status)
  end)

  it("holds a SEND until the peer posts a receive (credit flow control, no RNR)", function()
    p = V.pair()
    ffi.fill(p.abuf, 100, 0x5a)
    assert(p.a:post_send{ mr = p.amr, len = 100, wr_id = 1 })
    local early = assert(p.cq_a:wait(1, 0.05))
    assert.equal(0, #early, "no completion while no receive is posted")
    assert(p.b:post_recv{ mr = p.bmr, len = 100, wr_id = 2 })
    local wc = assert(p.cq_b:wait(1))
    assert.equal("IBV_WC_SUCCESS", wc[1].status)
    assert.equal(100, wc[1].byte_len)
    assert.equal(0x5a, p.bbuf[99])
    assert.equal("IBV_WC_SUCCESS", assert(p.cq_a:wait(1))[1].status)
  end)

  it("never reports a dead peer: sends to a destroyed QP complete as sent", function()
    p = V.pair()
    assert(p.b:destroy())
    assert(p.a:post_send{ mr = p.amr, len = 64, wr_id = 9 })
    local wc = assert(p.cq_a:wait(1))
    assert.equal("IBV_WC_SUCCESS", wc[1].status)
  end)

  it("fails every MR deregistration after a QP was moved to ERR", function()
    p = V.pair()
    assert(p.a:modify{ state = "ERR" })
    local ok, err = p.amr:dereg()
    assert.is_nil(ok)
    assert.matches("^EBUSY: .*moved to ERR; Apple's provider then fails every region unmap", err)
    -- as on the Mac, the only way out is to drop the device
    p.a:destroy(); p.b:destroy(); p.cq_a:destroy(); p.cq_b:destroy(); p.pd:free(); p.dev:close()
    p = nil
  end)

  it("refuses RTR on the DOWN port", function()
    p = V.pair{ connect = false }
    assert(p.a:modify{ state = "INIT", port = 1, pkey_index = 0, access = verbs.ACCESS_ALL })
    local ok, err = p.a:modify{ state = "RTR", mtu = 1024, dest_qpn = p.b.num, rq_psn = 0,
      dgid = V.LOOPBACK, sgid_index = 0, ah_port = 1 }
    assert.is_nil(ok)
    assert.matches("^ENETDOWN: .*port 1 is DOWN", err)
  end)
end)
