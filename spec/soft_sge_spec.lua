-- soft_sge_spec.lua - gather and scatter lists up to what mlx5 reports
-- (max_sge 30: UCX's ud_verbs asks 6), every byte where the lists say, 31
-- refused; and memory registered at an iova other than its address
-- (ibv_reg_mr_iova2): SGEs and remote addresses name the iova, in this
-- process and from another one.
local ffi = require("ffi")
local verbs = require("tbrt.verbs")
local V = require("verbs_helpers")
local E = require("soft_ends")

-- Post one work request with n SGEs of len bytes each, spaced out in mr.
local function sges(mr, n, len, stride)
  local list = ffi.new("struct ibv_sge[?]", n)
  for i = 0, n - 1 do
    list[i].addr = mr.addr + i * stride
    list[i].length = len
    list[i].lkey = mr.lkey
  end
  return list
end

describe("soft scatter/gather lists and iova", function()
  it("the device reports max_sge 30 and refuses a QP asking 31", function()
    local dev = assert(verbs.open("soft0", { personality = "linux-rc" }))
    assert.equal(30, dev:query().max_sge)
    local pd, cq = assert(dev:pd()), assert(dev:cq(4))
    local q = assert(pd:qp{ type = "UD", send_cq = cq, send_sge = 6, recv_sge = 30 })
    q:destroy()
    local ok, err = pd:qp{ type = "RC", send_cq = cq, send_sge = 31 }
    assert.is_nil(ok)
    assert.matches("^EINVAL: .*max_send_sge 31 .*at most 30", err)
    cq:destroy(); pd:free(); dev:close()
  end)

  for _, n in ipairs { 6, 30 } do
    it(n .. " SGEs gathered into a receive of " .. n .. " SGEs, every byte in place", function()
      local dev = assert(verbs.open("soft0", { personality = "linux-rc" }))
      local pd, cq = assert(dev:pd()), assert(dev:cq(16))
      local a = assert(pd:qp{ type = "RC", send_cq = cq, send_sge = n, recv_sge = n })
      local b = assert(pd:qp{ type = "RC", send_cq = cq, send_sge = n, recv_sge = n })
      assert(verbs.connect(a, b, { dgid = V.LOOPBACK, sgid_index = V.loopback_gid(dev, 1) }))
      local sbuf, rbuf = ffi.new("uint8_t[65536]"), ffi.new("uint8_t[65536]")
      for i = 0, 65535 do sbuf[i] = (i * 7 + 3) % 251 end
      local smr, rmr = assert(pd:reg(sbuf, 65536)), assert(pd:reg(rbuf, 65536))
      -- send: n pieces of 100 bytes, 1000 apart; receive: n pieces of 100, 500 apart
      local rl = sges(rmr, n, 100, 500)
      local rwr = ffi.new("struct ibv_recv_wr")
      rwr.sg_list, rwr.num_sge, rwr.wr_id = rl, n, 1
      assert.equal(0, require("tbrt.ffi").C.tbrt_post_recv(b.q, rwr, nil))
      local sl = sges(smr, n, 100, 1000)
      local swr = ffi.new("struct ibv_send_wr")
      swr.sg_list, swr.num_sge, swr.wr_id = sl, n, 2
      swr.opcode, swr.send_flags = verbs.OPCODE.SEND, 2   -- IBV_SEND_SIGNALED
      assert.equal(0, require("tbrt.ffi").C.tbrt_post_send(a.q, swr, nil))
      local wcs = assert(cq:wait(2, 2))
      assert.equal(2, #wcs)
      for _, w in ipairs(wcs) do assert.equal("IBV_WC_SUCCESS", w.status) end
      for i = 0, n - 1 do
        assert.equal(ffi.string(sbuf + i * 1000, 100), ffi.string(rbuf + i * 500, 100),
          "piece " .. i)
      end
      assert.equal(0, rbuf[100])                  -- the gaps untouched
      a:destroy(); b:destroy(); smr:dereg(); rmr:dereg(); cq:destroy(); pd:free(); dev:close()
    end)
  end

  it("an MR at an iova: local SGEs, RDMA WRITE and an atomic name the iova", function()
    local ATOMIC = bit.bor(verbs.ACCESS_ALL, verbs.ACCESS_ATOMIC)
    local dev = assert(verbs.open("soft0", { personality = "linux-rc" }))
    local pd, cq = assert(dev:pd()), assert(dev:cq(16))
    local a = assert(pd:qp{ type = "RC", send_cq = cq })
    local b = assert(pd:qp{ type = "RC", send_cq = cq })
    assert(verbs.connect(a, b, { dgid = V.LOOPBACK, sgid_index = V.loopback_gid(dev, 1) }))
    local sbuf, rbuf = ffi.new("uint8_t[8192]"), ffi.new("uint8_t[8192]")
    local smr = assert(pd:reg(sbuf, 8192, ATOMIC, 0x100000))
    local rmr = assert(pd:reg(rbuf, 8192, ATOMIC, 0x7000000000))
    assert.equal(0x100000, tonumber(smr.addr))
    ffi.copy(sbuf + 64, "at the iova")
    assert(a:post_send{ mr = smr, offset = 64, len = 11, opcode = "RDMA_WRITE", rkey = rmr.rkey,
      raddr = 0x7000000000 + 4096 })
    assert.equal("IBV_WC_SUCCESS", assert(cq:wait(1, 2))[1].status)
    assert.equal("at the iova", ffi.string(rbuf + 4096, 11))
    ffi.cast("uint64_t *", rbuf + 8)[0] = 40
    assert(a:post_send{ mr = smr, offset = 0, len = 8, opcode = "FETCH_AND_ADD", rkey = rmr.rkey,
      raddr = 0x7000000000 + 8, compare_add = 2 })
    assert.equal("IBV_WC_SUCCESS", assert(cq:wait(1, 2))[1].status)
    assert.equal(42, tonumber(ffi.cast("uint64_t *", rbuf + 8)[0]))
    assert.equal(40, tonumber(ffi.cast("uint64_t *", sbuf)[0]))
    -- an address of the process is not one of the MR's
    assert(a:post_send{ mr = smr, len = 8, opcode = "RDMA_WRITE", rkey = rmr.rkey,
      raddr = ffi.cast("uintptr_t", rbuf) })
    assert.equal("IBV_WC_REM_ACCESS_ERR", assert(cq:wait(1, 2))[1].status)
    a:destroy(); b:destroy(); smr:dereg(); rmr:dereg(); cq:destroy(); pd:free(); dev:close()
  end)

  it("an MR at an iova in another process: RDMA WRITE to its iova", function()
    local x, y = E.spawn(), E.spawn()
    local rx = x:must{ op = "open", personality = "linux-rc", type = "RC" }
    local ry = y:must{ op = "open", personality = "linux-rc", type = "RC", iova = "1099511627776" }
    x:must{ op = "connect", qpn = ry.qpn }
    y:must{ op = "connect", qpn = rx.qpn }
    x:must{ op = "post_send", opcode = "RDMA_WRITE", rkey = ry.recv_key,
      raddr = "1099511628800", len = 8 }                -- 2^40 + 1024
    local r = x:must{ op = "poll", n = 1, timeout = 2 }
    assert.equal("IBV_WC_SUCCESS", r.wcs[1].status)
    assert.equal(string.rep("\90", 8), y:must{ op = "read", offset = 1024, len = 8 }.data)
    E.close(x, y)
  end)
end)
