-- mlx5_data_spec.lua - the mlx5 driver's data path on two model NICs: a full
-- bring-up, then RC (and UC) SEND and RDMA WRITE with every byte checked, in
-- one process and across two; error CQEs with their syndromes; completion
-- events through the EQ and the completion fd; teardown leaving no pages or
-- objects behind.
local ffi = require("ffi")
local H = require("helpers")
local mlx5 = require("tbrt.mlx5")
local X = require("mlx5_pair")
local C = require("tbrt.ffi").C

pcall(ffi.cdef, [[
struct pollfd { int fd; short events; short revents; };
int poll(struct pollfd *fds, unsigned long nfds, int timeout);
]])

local function readable(fd, ms)
  local p = ffi.new("struct pollfd[1]")
  p[0].fd, p[0].events = fd, 1 -- POLLIN
  return ffi.C.poll(p, 1, ms or 0) == 1
end

local function one(cq, what)
  local wc = assert(X.wait(cq, 1, 5))
  assert.equal(1, #wc, what .. ": no completion")
  return wc[1]
end

local function ok_wc(cq, what)
  local w = one(cq, what)
  assert.equal("IBV_WC_SUCCESS", w.status, what .. ": " .. tostring(w.why))
  return w
end

describe("mlx5 data path on two model NICs", function()
  local a, b

  local function pair(o)
    a, b = X.side("mlx5:model0", o), X.side("mlx5:model0", o)
    assert(X.connect(a, { qpn = b.qp.num }))
    assert(X.connect(b, { qpn = a.qp.num }))
  end

  after_each(function()
    for _, s in ipairs { a, b } do if s and s.dev.d then X.close(s) end end
    a, b = nil, nil
  end)

  it("lists the model as a usable Linux-flavoured device and says why PCI is not", function()
    local n = C.tbrt_devices(nil, 0)
    local list = ffi.new("tbrt_devinfo[?]", n)
    C.tbrt_devices(list, n)
    local model, pci
    for i = 0, n - 1 do
      local name = ffi.string(list[i].name)
      if name == "mlx5:model0" then model = list[i] end
      if ffi.string(list[i].kind) == "mlx5" and name ~= "mlx5:model0" then pci = list[i] end
    end
    assert.truthy(model)
    assert.equal(1, model.usable)
    assert.equal(C.TBRT_FLAVOR_LINUX, model.flavor)
    assert.truthy(pci)
    assert.equal(0, pci.usable)
    assert.matches("Mellanox", ffi.string(pci.why))
  end)

  it("fails clearly on a PCI address without a device", function()
    local verbs = require("tbrt.verbs")
    local d, err = verbs.open("mlx5:0000:99:00.0")
    assert.is_nil(d)
    assert.matches("^ENODEV: mlx5 0000:99:00.0: no way to the device: vfio: .*; sysfs: .*resource0", err)
  end)

  it("brings up a real ConnectX bound to vfio-pci", function()
    local n = C.tbrt_devices(nil, 0)
    local list = ffi.new("tbrt_devinfo[?]", n)
    C.tbrt_devices(list, n)
    local hw
    for i = 0, n - 1 do
      local name = ffi.string(list[i].name)
      if ffi.string(list[i].kind) == "mlx5" and name ~= "mlx5:model0" and list[i].usable == 1 then hw = name end
    end
    if not hw then
      pending("hw: no Mellanox PCI device bound to vfio-pci here")
      return
    end
    local dev = assert(mlx5.open{ pci = hw:sub(6) })
    local caps = assert(dev:cmd("QUERY_HCA_CAP", { op_mod = 1 }))
    assert.equal(12, caps["capability.cmd_hca_cap.log_pg_sz"])
    assert(dev:close())
  end)

  it("reports RoCE v2 GIDs: link-local first, then ::ffff:127.0.0.1 among the host's", function()
    a = X.side("mlx5:model0")
    local gids = assert(a.dev:gids(1))
    assert.equal("\254\128", gids[1].gid:sub(1, 2))
    assert.truthy(a.gid)
    for _, g in ipairs(gids) do assert.equal("RoCEv2", g.type) end
    local port = a.dev:port(1)
    assert.equal("ACTIVE", port.state)
  end)

  it("moves an RC SEND and an RDMA WRITE between two model NICs, every byte checked", function()
    pair()
    X.fill(a.buf, 0, X.SEND_LEN, 1)
    assert(b.qp:post_recv{ mr = b.mr, len = X.SEND_LEN, wr_id = 71 })
    assert(a.qp:post_send{ mr = a.mr, len = X.SEND_LEN, wr_id = 17 })
    local s = ok_wc(a.cq, "send")
    assert.equal(17, s.wr_id)
    assert.equal("SEND", s.opcode)
    local r = ok_wc(b.cq, "recv")
    assert.same({ 71, X.SEND_LEN, "RECV" }, { r.wr_id, r.byte_len, r.opcode })
    assert.is_nil(X.check(b.buf, 0, X.SEND_LEN, 1))
    -- RDMA WRITE straight into b's memory by rkey; b sees nothing
    X.fill(a.buf, X.WRITE_OFF, X.WRITE_LEN, 2)
    assert(a.qp:post_send{ mr = a.mr, offset = X.WRITE_OFF, len = X.WRITE_LEN, wr_id = 18,
      opcode = "RDMA_WRITE", rkey = b.mr.rkey, raddr = b.mr.addr + 100 })
    assert.equal("RDMA_WRITE", ok_wc(a.cq, "write").opcode)
    assert.is_nil(X.check(b.buf, 100, X.WRITE_LEN, 2))
    assert.equal(0, #b.cq:poll(4))
    -- SEND with immediate, and many in a row (queue wrap, BlueFlame 0x800/0x900 alternating)
    assert(b.qp:post_recv{ mr = b.mr, len = 64, wr_id = 72 })
    assert(a.qp:post_send{ mr = a.mr, len = 8, wr_id = 19, opcode = "SEND_WITH_IMM", imm = 0xabcd })
    ok_wc(a.cq, "send imm")
    local ri = ok_wc(b.cq, "recv imm")
    assert.equal(0xabcd, ri.imm)
    for round = 1, 3 do
      for i = 1, 20 do assert(b.qp:post_recv{ mr = b.mr, offset = i * 1000, len = 1000, wr_id = i }) end
      for i = 1, 20 do
        X.fill(a.buf, i * 1000, 1000, i + round)
        assert(a.qp:post_send{ mr = a.mr, offset = i * 1000, len = 1000, wr_id = 100 + i })
      end
      local ws = assert(X.wait(a.cq, 20, 5))
      local wr = assert(X.wait(b.cq, 20, 5))
      assert.equal(20, #ws)
      assert.equal(20, #wr)
      for i = 1, 20 do
        assert.same({ 100 + i, "IBV_WC_SUCCESS" }, { ws[i].wr_id, ws[i].status })
        assert.same({ i, "IBV_WC_SUCCESS", 1000 }, { wr[i].wr_id, wr[i].status, wr[i].byte_len })
        assert.is_nil(X.check(b.buf, i * 1000, 1000, i + round))
      end
    end
  end)

  it("connects with INIT2RTR carrying the GID, QPN and a UDP source port from both QPNs", function()
    a, b = X.side("mlx5:model0"), X.side("mlx5:model0")
    local h = assert(mlx5.of_dev(a.dev.d))
    local dir = H.tmpdir()
    assert(h:trace(dir .. "/t"))
    assert(X.connect(a, { qpn = b.qp.num }))
    assert(h:trace(nil))
    local cmds = require("tbrt.mlx5.trace").parse(H.read_file(dir .. "/t"))
    H.rmtree(dir)
    local names = {}
    for _, c in ipairs(cmds) do names[#names + 1] = mlx5.layout_of(c.opcode, false) end
    assert.same({ "rst2init_qp_in", "init2rtr_qp_in", "rtr2rts_qp_in" }, names)
    local rtr = mlx5.decode("init2rtr_qp_in", cmds[2].input)
    -- Linux rdma_calc_flow_label + rdma_flow_label_to_udp_sport, written out again here
    local v = ffi.cast("uint64_t", a.qp.num) * b.qp.num
    v = bit.bxor(v, v / 2 ^ 20)
    v = bit.bxor(v, v / 2 ^ 40)
    local fl = tonumber(bit.band(v, 0xfffff))
    local sport = bit.bor(bit.bxor(bit.band(fl, 0x3fff), bit.rshift(bit.band(fl, 0xfc000), 14)), 0xc000)
    assert.equal(sport, rtr["qpc.primary_address_path.udp_sport"])
    assert.equal(b.qp.num, rtr["qpc.remote_qpn"])
    assert.equal(X.LOOPBACK, rtr["qpc.primary_address_path.rgid_rip"])
    assert.equal(a.gid, rtr["qpc.primary_address_path.src_addr_index"])
    assert.equal(a.qp.num, rtr.qpn)
    assert.equal(3, rtr["qpc.mtu"]) -- 1024
  end)

  it("moves UC SENDs and RDMA WRITEs too", function()
    pair{ type = "UC" }
    X.fill(a.buf, 0, 5000, 3)
    assert(b.qp:post_recv{ mr = b.mr, len = 5000, wr_id = 1 })
    assert(a.qp:post_send{ mr = a.mr, len = 5000, wr_id = 2 })
    ok_wc(a.cq, "uc send")
    assert.equal(5000, ok_wc(b.cq, "uc recv").byte_len)
    assert.is_nil(X.check(b.buf, 0, 5000, 3))
    assert(a.qp:post_send{ mr = a.mr, len = 5000, wr_id = 3, opcode = "RDMA_WRITE", rkey = b.mr.rkey,
      raddr = b.mr.addr + 40000 })
    ok_wc(a.cq, "uc write")
    assert.is_nil(X.check(b.buf, 40000, 5000, 3))
  end)

  it("gives error CQEs with their syndromes: bad lkey, bad rkey, short receive, flush", function()
    pair()
    -- a bad lkey: the NIC's local protection error (syndrome 0x04), nothing sent
    local bad = { addr = a.mr.addr, lkey = a.mr.lkey + 0x100, len = a.mr.len }
    assert(a.qp:post_send{ mr = bad, len = 10, wr_id = 5 })
    local w = one(a.cq, "bad lkey")
    assert.equal("IBV_WC_LOC_PROT_ERR", w.status)
    assert.equal(0x04, bit.rshift(w.vendor_err, 8))
    assert.matches("mlx5 CQE syndrome 0x4 MLX5_CQE_SYNDROME_LOCAL_PROT_ERR", w.why)
    assert.matches("completion error: qp 0x%x+ wr_id 5: local protection error", a.dev:why())
    -- the QP is in error now: what follows is flushed (syndrome 0x05)
    assert(a.qp:post_send{ mr = a.mr, len = 10, wr_id = 6 })
    w = one(a.cq, "flush")
    assert.same({ 6, "IBV_WC_WR_FLUSH_ERR", 0x05 }, { w.wr_id, w.status, bit.rshift(w.vendor_err, 8) })
  end)

  it("reports a bad rkey and a receive buffer too short as the responder's errors", function()
    pair()
    assert(a.qp:post_send{ mr = a.mr, len = 64, wr_id = 8, opcode = "RDMA_WRITE", rkey = b.mr.rkey + 0x100,
      raddr = b.mr.addr })
    local w = one(a.cq, "bad rkey")
    assert.same({ "IBV_WC_REM_ACCESS_ERR", 0x13 }, { w.status, bit.rshift(w.vendor_err, 8) })
  end)

  it("reports a receive buffer too short (responder length error, requester invalid request)", function()
    pair()
    assert(b.qp:post_recv{ mr = b.mr, len = 100, wr_id = 9 })
    assert(a.qp:post_send{ mr = a.mr, len = 1000, wr_id = 10 })
    local ws, wr = one(a.cq, "requester"), one(b.cq, "responder")
    assert.same({ "IBV_WC_LOC_LEN_ERR", 0x01 }, { wr.status, bit.rshift(wr.vendor_err, 8) })
    assert.same({ "IBV_WC_REM_INV_REQ_ERR", 0x12 }, { ws.status, bit.rshift(ws.vendor_err, 8) })
  end)

  it("raises completion events through the EQ: the fd is readable after arming only", function()
    pair()
    local fd = b.cq.c.fd
    assert.is_false(readable(fd))
    C.tbrt_cq_arm(b.cq.c)
    assert(b.qp:post_recv{ mr = b.mr, len = 64, wr_id = 1 })
    assert(a.qp:post_send{ mr = a.mr, len = 64, wr_id = 1 })
    assert.is_true(readable(fd, 2000))
    assert.equal(1, C.tbrt_cq_ack(b.cq.c))
    assert.is_false(readable(fd))
    ok_wc(b.cq, "recv")
    ok_wc(a.cq, "send")
    -- not armed: a completion makes no event
    assert(b.qp:post_recv{ mr = b.mr, len = 64, wr_id = 2 })
    assert(a.qp:post_send{ mr = a.mr, len = 64, wr_id = 2 })
    ok_wc(b.cq, "recv 2")
    assert.is_false(readable(fd, 50))
    -- armed while a completion already waits: the event fires at once
    assert(b.qp:post_recv{ mr = b.mr, len = 64, wr_id = 3 })
    assert(a.qp:post_send{ mr = a.mr, len = 64, wr_id = 3 })
    ok_wc(a.cq, "send 2")
    ok_wc(a.cq, "send 3")
    assert.truthy(X.wait(b.cq, 0, 0))
    ffi.C.usleep(20000)
    C.tbrt_cq_arm(b.cq.c)
    assert.is_true(readable(fd, 2000))
    assert.equal(1, C.tbrt_cq_ack(b.cq.c))
  end)

  it("tears down leaving no pages or objects in the model", function()
    pair()
    local h = assert(mlx5.of_dev(a.dev.d))
    local st = h:state()
    assert.same({ 1, 1, 1, 2 }, { st.qps, st.cqs, st.eqs, st.mkeys }) -- + the PA mkey
    assert(a.qp:destroy()); assert(a.mr:dereg()); assert(a.cq:destroy()); assert(a.pd:free())
    st = h:state()
    assert.same({ 0, 0, 0, 1, 1, 1 }, { st.qps, st.cqs, st.eqs, st.mkeys, st.pds, st.uars })
    assert(h:teardown())
    st = h:state()
    assert.same({ 0, 0, 0, 0, 0, 0, 0, 0, 0 }, { st.enabled, st.pages_given, st.qps, st.cqs, st.eqs,
      st.mkeys, st.pds, st.uars, st.roce_entries })
    assert.equal(0, st.bad_commands)
    a.dev:close()
    a = nil
  end)

  it("carries a tbrt link (the engine) over two model NICs", function()
    local L = require("links")
    local task = require("tbrt.task")
    task.run(function()
      local la, lb, aerr, berr = L.pair({ device = "mlx5" })
      assert.truthy(la, aerr)
      assert.truthy(lb, berr)
      assert.matches("mlx5:model0", tostring(la))
      local n = 1000003
      local src = L.pattern(n, 5)
      local sender = task.spawn(function() return la:send(src, n) and la:flush() end)
      local dst = ffi.new("uint8_t[?]", n)
      local got, err = lb:recv_into(dst, n, 10)
      assert.equal(n, got, err)
      assert.is_nil(L.check(dst, n, 5))
      assert.truthy(sender:join(10))
      assert(la:close())
      assert(lb:close())
    end)
  end)

  it("moves SEND and RDMA WRITE between model NICs in two processes", function()
    local dir = H.tmpdir()
    local cmd = string.format("(TBRT_BUILD='%s' '%s' '%s/spec/support/mlx5_peer.lua' '%s' > '%s/peer.out' 2>&1; echo $? > '%s/peer.rc.tmp'; mv '%s/peer.rc.tmp' '%s/peer.rc') &",
      H.build, H.tbrt, H.root, dir, dir, dir, dir, dir)
    os.execute(cmd)
    a = X.side("mlx5:model0")
    local peer = X.await(dir .. "/peer.info", 15)
    assert.truthy(peer, "the peer published nothing: " .. (H.read_file(dir .. "/peer.out") or ""))
    X.publish(dir .. "/spec.info", a)
    assert(X.connect(a, peer))
    assert(a.qp:post_recv{ mr = a.mr, len = 64, wr_id = 50 })
    assert.truthy(X.await(dir .. "/peer.ready", 15))
    X.fill(a.buf, 0, X.SEND_LEN, 1)
    assert(a.qp:post_send{ mr = a.mr, len = X.SEND_LEN, wr_id = 1 })
    -- our SEND's completion and the peer's answer, in either order: the
    -- peer may answer before our acknowledgement lands
    local wcs = assert(X.wait(a.cq, 2, 10))
    assert.equal(2, #wcs, "no SEND from the peer: " .. (H.read_file(dir .. "/peer.out") or ""))
    local by = {}
    for _, w in ipairs(wcs) do by[tonumber(w.wr_id)] = w end
    assert.truthy(by[1], "our SEND completed")
    assert.equal("IBV_WC_SUCCESS", by[1].status, tostring(by[1].why))
    local wc = { by[50] }
    assert.truthy(wc[1], "the peer's SEND arrived")
    assert.same({ 50, "IBV_WC_SUCCESS", 0x1234 }, { wc[1].wr_id, wc[1].status, wc[1].imm })
    -- the peer's RDMA WRITE came before its SEND: every byte is there
    assert.is_nil(X.check(a.buf, X.WRITE_OFF, X.WRITE_LEN, 2))
    X.touch(dir .. "/spec.done")
    assert.truthy(X.await(dir .. "/peer.rc", 15))
    assert.matches("ok", H.read_file(dir .. "/peer.out"))
    assert.equal("0", (H.read_file(dir .. "/peer.rc"):gsub("%s", "")))
    H.rmtree(dir)
  end)
end)
