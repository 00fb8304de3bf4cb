-- soft_atomic_spec.lua - RC atomics of the soft device: CMP_AND_SWP and
-- FETCH_AND_ADD on 8 aligned bytes of a region with REMOTE_ATOMIC, the
-- original value in the requester's 8-byte SGE, completions IBV_WC_COMP_SWAP
-- and IBV_WC_FETCH_ADD; a region without REMOTE_ATOMIC or a bad rkey fails
-- with REM_ACCESS_ERR (and the responder's QP_ACCESS_ERR event), a
-- misaligned address with REM_INV_REQ_ERR; posts verbs forbid are refused
-- with a message; and two processes adding to one counter at once lose no
-- add (the responder does not even call in).
local ffi = require("ffi")
local verbs = require("tbrt.verbs")
local task = require("tbrt.task")
local V = require("verbs_helpers")
local E = require("soft_ends")

local ATOMIC = bit.bor(verbs.ACCESS_ALL, verbs.ACCESS_ATOMIC)

local function u64(p) return ffi.cast("uint64_t *", p)[0] end
local function set_u64(p, v) ffi.cast("uint64_t *", p)[0] = v end

describe("soft RC atomics", function()
  local p
  after_each(function() if p then V.close(p) p = nil end end)

  it("the device reports IBV_ATOMIC_HCA on linux-rc, none on apple-uc (UC only)", function()
    local dev = assert(verbs.open("soft0", { personality = "linux-rc" }))
    assert.equal(1, dev:query().atomic_cap)           -- IBV_ATOMIC_HCA
    dev:close()
    dev = assert(verbs.open("soft0", { personality = "apple-uc" }))
    assert.equal(0, dev:query().atomic_cap)
    dev:close()
  end)

  it("CMP_AND_SWP swaps when equal, leaves it when not; the original comes back either way", function()
    p = V.pair{ personality = "linux-rc", type = "RC", access = ATOMIC }
    set_u64(p.bbuf + 64, 0x1111)
    local function cas(cmp, swap, wr_id)
      assert(p.a:post_send{ mr = p.amr, offset = 8 * wr_id, len = 8, wr_id = wr_id,
        opcode = "CMP_AND_SWP", rkey = p.bmr.rkey, raddr = p.bmr.addr + 64, compare_add = cmp,
        swap = swap })
      local w = assert(p.cq_a:wait(1, 2))
      assert.equal(1, #w)
      assert.equal("IBV_WC_SUCCESS", w[1].status)
      assert.equal("COMP_SWAP", w[1].opcode)
      assert.equal(8, w[1].byte_len)
      assert.equal(wr_id, w[1].wr_id)
      return u64(p.abuf + 8 * wr_id)
    end
    assert.equal(0x1111, tonumber(cas(0x1111, 0x2222, 1)))    -- equal: swapped
    assert.equal(0x2222, tonumber(u64(p.bbuf + 64)))
    assert.equal(0x2222, tonumber(cas(0x1111, 0x3333, 2)))    -- not equal: kept
    assert.equal(0x2222, tonumber(u64(p.bbuf + 64)))
    assert.same({}, assert(p.cq_b:poll(4)))                  -- the responder sees nothing
  end)

  it("FETCH_AND_ADD adds (64 bits, wrapping) and returns what was there", function()
    p = V.pair{ personality = "linux-rc", type = "RC", access = ATOMIC }
    set_u64(p.bbuf + 8, 0xfffffffffffffffeULL)
    assert(p.a:post_send{ mr = p.amr, len = 8, wr_id = 9, opcode = "FETCH_AND_ADD",
      rkey = p.bmr.rkey, raddr = p.bmr.addr + 8, compare_add = 5 })
    local w = assert(p.cq_a:wait(1, 2))
    assert.equal("IBV_WC_SUCCESS", w[1].status)
    assert.equal("FETCH_ADD", w[1].opcode)
    assert.is_true(u64(p.abuf) == 0xfffffffffffffffeULL)
    assert.equal(3, tonumber(u64(p.bbuf + 8)))
  end)

  it("a region without REMOTE_ATOMIC: REM_ACCESS_ERR, and QP_ACCESS_ERR at the responder", function()
    p = V.pair{ personality = "linux-rc", type = "RC" }       -- ACCESS_ALL: no atomics
    assert(p.a:post_send{ mr = p.amr, len = 8, opcode = "FETCH_AND_ADD", rkey = p.bmr.rkey,
      raddr = p.bmr.addr, compare_add = 1 })
    local w = assert(p.cq_a:wait(1, 2))
    assert.equal("IBV_WC_REM_ACCESS_ERR", w[1].status)
    assert.matches("REMOTE_ATOMIC", w[1].why)
    assert.equal("ERR", p.a:state())
    assert.same({}, assert(p.cq_b:poll(4)))     -- the responder's turn: it goes to ERR
    local ev = p.dev:event()
    assert(ev, "no event at the responder")
    assert.equal("QP_ACCESS_ERR", ev.type)
    assert.equal(p.b.num, ev.num)
    assert.equal("ERR", p.b:state())
  end)

  it("a misaligned remote address: REM_INV_REQ_ERR, QP_REQ_ERR at the responder", function()
    p = V.pair{ personality = "linux-rc", type = "RC", access = ATOMIC }
    assert(p.a:post_send{ mr = p.amr, len = 8, opcode = "CMP_AND_SWP", rkey = p.bmr.rkey,
      raddr = p.bmr.addr + 4 })
    local w = assert(p.cq_a:wait(1, 2))
    assert.equal("IBV_WC_REM_INV_REQ_ERR", w[1].status)
    assert.matches("8%-byte aligned", w[1].why)
    p.cq_b:poll(4)
    local ev = p.dev:event()
    assert(ev and ev.type == "QP_REQ_ERR", "no QP_REQ_ERR")
  end)

  it("refuses an atomic that is not one 8-byte SGE, or on a UC QP, saying why", function()
    p = V.pair{ personality = "linux-rc", type = "RC", access = ATOMIC }
    local ok, err = p.a:post_send{ mr = p.amr, len = 16, opcode = "FETCH_AND_ADD",
      rkey = p.bmr.rkey, raddr = p.bmr.addr }
    assert.is_nil(ok)
    assert.matches("^EINVAL: .*an atomic takes one SGE of 8 bytes", err)
    V.close(p)
    p = V.pair{ personality = "linux-rc", type = "UC", access = ATOMIC }
    ok, err = p.a:post_send{ mr = p.amr, len = 8, opcode = "CMP_AND_SWP", rkey = p.bmr.rkey,
      raddr = p.bmr.addr }
    assert.is_nil(ok)
    assert.matches("^EINVAL: .*IBV_WR_ATOMIC_CMP_AND_SWP needs an RC QP %(this QP is UC%)", err)
  end)

  it("two processes adding to one counter at the same time lose no add", function()
    local N = os.getenv("TBRT_ASAN") and 300 or 2000
    local dev = assert(verbs.open("soft0", { personality = "linux-rc" }))
    local pd, cq = assert(dev:pd()), assert(dev:cq(64))
    local buf = ffi.new("uint64_t[8]")
    local mr = assert(pd:reg(buf, 64, ATOMIC))
    local ends, qps = {}, {}
    for i = 1, 2 do
      local x = E.spawn()
      local r = x:must{ op = "open", personality = "linux-rc", type = "RC" }
      x.qpn = r.qpn
      local q = assert(pd:qp{ type = "RC", send_cq = cq, recv_cq = cq })
      assert(q:modify{ state = "INIT", port = 1, pkey_index = 0, access = ATOMIC })
      assert(q:modify{ state = "RTR", mtu = 1024, dest_qpn = x.qpn, rq_psn = 0, dgid = V.LOOPBACK,
        sgid_index = V.loopback_gid(dev, 1), ah_port = 1, min_rnr_timer = 1, max_dest_rd_atomic = 1 })
      assert(q:modify{ state = "RTS", sq_psn = 0, timeout = 14, retry_cnt = 7, rnr_retry = 7,
        max_rd_atomic = 1 })
      x:must{ op = "connect", qpn = q.num }
      ends[i], qps[i] = x, q
    end
    -- both at once; this process only waits
    local done = {}
    for i = 1, 2 do
      task.spawn(function()
        done[i] = ends[i]:call({ op = "fetch_add", n = N, rkey = mr.rkey,
          raddr = string.format("%.0f", tonumber(mr.addr) + 8) }, 60)  -- exact in JSON
      end)
    end
    assert(task.wait(function() return done[1] and done[2] end, 60), "the adders did not finish")
    for i = 1, 2 do assert.is_nil(done[i].err, done[i].err) end
    assert.equal(2 * N, tonumber(buf[1]))
    assert.equal(0, tonumber(buf[0]))                -- its neighbours untouched
    assert.equal(0, tonumber(buf[2]))
    E.close(ends[1], ends[2])
    for _, q in ipairs(qps) do q:destroy() end
    mr:dereg(); cq:destroy(); pd:free(); dev:close()
  end)
end)
