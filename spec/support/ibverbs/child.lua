-- child.lua - the process side of spec/ibverbs_spec.lua. The ibverbs device
-- loads its library once per process, at first use, from $TBRT_IBVERBS_LIB,
-- so every case runs in a fresh `tbrt` with that environment:
--
--   tbrt spec/support/ibverbs/child.lua MODE [args...]
--
-- It does the work and prints what it saw as one JSON line "RESULT {...}";
-- the spec asserts on it. Modes:
--   list [names...]       ibverbs entries of tbrt_devices, opening each name,
--                         and a link probe with device = "ibverbs"
--   verbs [port]          the verbs tier on softib0: queries, GIDs, RC data,
--                         the completion fd, error completions (next to the
--                         same case on a soft device), UD through an AH,
--                         close with objects left behind
--   errors                every failure path of the device, natural (the soft
--                         device refuses) or injected (TBRT_VERBS_FAIL)
--   link [stride_b]       a link pair in this process over the C link API;
--                         with stride_b the two sides disagree on the stride
--   serve FILE | connect FILE   one side of a two-process link through
--                         tbrt.listen / tbrt.connect (FILE: the port)
local here = arg[0]:match("^(.*)/ibverbs/child%.lua$") or "spec/support"
package.path = here .. "/?.lua;" .. package.path

local ffi = require("ffi")
local cjson = require("cjson")
local uv = require("luv")
local tbrt = require("tbrt")
local verbs = require("tbrt.verbs")
local b = require("tbrt.ffi")
local P = require("ibverbs.pair")
local V = require("verbs_helpers")

local C = b.C
local mode = arg[1]
local result = { mode = mode, lib = os.getenv("TBRT_IBVERBS_LIB") or "" }

ffi.cdef [[
  const char *tbrt_verbs_trace(void);
  const char *tbrt_verbs_counts(void);
  void tbrt_verbs_trace_reset(void);
]]
-- tbrt's libibverbs, if that is what this process loaded (dlopen gives the
-- same handle again): its diagnostics (bindings/verbs/diag.c) say which
-- calls the ibverbs device made, in order.
local function ours()
  local path = os.getenv("TBRT_IBVERBS_LIB")
  if not path then return nil end
  local ok, lib = pcall(ffi.load, path)
  if not ok or not pcall(function() return lib.tbrt_verbs_trace end) then return nil end
  return lib
end

local function trace_report()
  local S = ours()
  if not S then return end
  result.trace = ffi.string(S.tbrt_verbs_trace())
  result.counts = {}
  for k, v in ffi.string(S.tbrt_verbs_counts()):gmatch("(%S+)=(%d+)") do result.counts[k] = tonumber(v) end
end

-- ---- list ---------------------------------------------------------------

local function list()
  result.devices = {}
  for _, d in ipairs(tbrt.devices()) do
    if d.kind == "ibverbs" then result.devices[#result.devices + 1] = d end
  end
  result.opens = {}
  for i = 2, #arg do
    local dev, err = verbs.open(arg[i])
    result.opens[arg[i]] = dev and ("opened " .. dev.name) or err
    if dev then dev:close() end
  end
  local fa, fb = P.tcp_pair("127.0.0.1")
  local l, err = P.probe(fa, { device = "ibverbs", timeout = 5 })
  if l then
    result.probe = "ok"
    result.why_device = P.info(l).why_device
    C.tbrt_link_close(l)
  else
    result.probe = err
    C.close(fa)
  end
  C.close(fb)
end

-- ---- verbs ---------------------------------------------------------------

-- The completions of one length-error case: a 16-byte receive meets a
-- 64-byte send (then, RC, one more send on the QP the error failed).
local function length_error_case(device, port, qtype, personality)
  local p = V.pair({ device = device, personality = personality, type = qtype, port = port })
  assert(p.b:post_recv{ mr = p.bmr, len = 16, wr_id = 7 })
  assert(p.a:post_send{ mr = p.amr, len = 64, wr_id = 8 })
  local out = {}
  local deadline = uv.hrtime() / 1e9 + 2
  while #out < 2 and uv.hrtime() / 1e9 < deadline do
    for _, cq in ipairs { p.cq_a, p.cq_b } do
      for _, w in ipairs(assert(cq:poll(8))) do
        out[#out + 1] = { wr_id = w.wr_id, status = w.status, opcode = w.opcode,
          vendor_err = w.vendor_err, why = w.why }
      end
    end
  end
  if qtype == "RC" then
    -- a send on the QP the error moved to ERR is flushed
    assert(p.a:post_send{ mr = p.amr, len = 8, wr_id = 9 })
    local flushed = assert(p.cq_a:wait(1, 2))
    out[#out + 1] = flushed[1] and { wr_id = flushed[1].wr_id, status = flushed[1].status,
      opcode = flushed[1].opcode, vendor_err = flushed[1].vendor_err, why = flushed[1].why }
  end
  table.sort(out, function(x, y) return x.wr_id < y.wr_id end)
  V.close(p)
  return out
end

local function readable(fd, ms)
  local pfd = ffi.new("struct pollfd[1]")
  pfd[0].fd, pfd[0].events = fd, 1
  return C.poll(pfd, 1, ms) == 1
end

-- Apple-like devices (apple-uc underneath) have UC queue pairs only.
local function verbs_case(port)
  local apple = (os.getenv("TBRT_IBVERBS_LIB") or ""):match("librdma") ~= nil
  local qtype = apple and "UC" or "RC"
  local personality = apple and "apple-uc" or "linux-rc"
  local dev = assert(verbs.open("softib0"))
  result.kind = ffi.string(C.tbrt_dev_kind(dev.d))
  result.personality = ffi.string(C.tbrt_dev_personality(dev.d))
  result.flavor = C.tbrt_dev_flavor(dev.d)
  local q = assert(dev:query())
  result.phys_port_cnt = q.phys_port_cnt
  result.ports = {}
  for i = 1, q.phys_port_cnt do
    local pa = assert(dev:port(i))
    result.ports[i] = { state = pa.state, gid_tbl_len = pa.gid_tbl_len, mtu = pa.active_mtu }
  end
  -- GIDs: the loopback entry with its return code and type, an empty one
  local e = ffi.new("struct ibv_gid_entry")
  local gid_index = V.loopback_gid(dev, port)
  result.loopback_gid_index = gid_index
  result.gid_rc = C.tbrt_gid_query(dev.d, port, gid_index, e)
  result.gid_type = tonumber(e.gid_type)
  result.gid_text = verbs.gid_text(ffi.string(e.gid.raw, 16))
  result.empty_gid_rc = C.tbrt_gid_query(dev.d, port, result.ports[port].gid_tbl_len - 1, e)
  result.bad_port = select(2, dev:port(9))
  dev:close()

  -- RC data, and the completion fd: armed, it turns readable on a completion
  local p = V.pair({ device = "softib0", type = qtype, port = port })
  local fd = p.cq_b.c.fd
  result.fd_readable_before = readable(fd, 0)
  assert(C.tbrt_cq_arm(p.cq_b.c) == 0)
  ffi.copy(p.abuf, "hello over ibverbs")
  assert(p.b:post_recv{ mr = p.bmr, len = 64, wr_id = 1 })
  assert(p.a:post_send{ mr = p.amr, len = 18, wr_id = 2 })
  result.fd_readable_after = readable(fd, 2000)
  result.acked = C.tbrt_cq_ack(p.cq_b.c)
  result.fd_readable_acked = readable(fd, 0)
  local w = assert(p.cq_b:wait(1, 2))[1]
  result.recv = w and { status = w.status, opcode = w.opcode, byte_len = w.byte_len,
    src_ok = w.src_qp == p.a.num, data = ffi.string(p.bbuf, 18) }
  V.close(p)

  -- the same error case on the soft device underneath and through ibverbs
  result.errors_ibverbs = length_error_case("softib0", port, qtype, personality)
  result.errors_soft = length_error_case("soft0", port, qtype, personality)
  if apple then
    result.close_trace = ""
    trace_report()
    return
  end

  -- UD: the tbrt address handle in wr.ud.ah reaches the library as its own
  local udev = assert(verbs.open("softib0"))
  local pd, cq = assert(udev:pd()), assert(udev:cq(16))
  local x = assert(pd:qp{ type = "UD", send_cq = cq, recv_cq = cq })
  local y = assert(pd:qp{ type = "UD", send_cq = cq, recv_cq = cq })
  for _, qp in ipairs { x, y } do
    assert(qp:modify{ state = "INIT", port = port, pkey_index = 0, qkey = 0x1234 })
    assert(qp:modify{ state = "RTR" })
    assert(qp:modify{ state = "RTS", sq_psn = 0 })
  end
  local buf = ffi.new("uint8_t[4096]")
  local mr = assert(pd:reg(buf, 4096))
  ffi.copy(buf, "datagram")
  assert(y:post_recv{ mr = mr, offset = 1024, len = 1024, wr_id = 1 })
  local ah = assert(udev:ah{ pd = pd, port = port, dgid = V.LOOPBACK, sgid_index = gid_index })
  assert(x:post_send{ mr = mr, len = 8, ah = ah, remote_qpn = y.num, remote_qkey = 0x1234,
    wr_id = 3 })
  local got = assert(cq:wait(2, 2))
  for _, c in ipairs(got) do
    if c.opcode == "RECV" then
      result.ud = { status = c.status, byte_len = c.byte_len, data = ffi.string(buf + 1064, 8) }
    end
  end
  local _, noah = x:post_send{ mr = mr, len = 8, remote_qpn = y.num, wr_id = 4 }
  result.ud_without_ah = noah
  assert(C.tbrt_ah_destroy(ah) == 0)
  -- close with everything still open: the device destroys it in order
  trace_report()
  local before = result.trace
  if ours() then ours().tbrt_verbs_trace_reset() end
  udev:close()
  trace_report()
  result.close_trace, result.trace = result.trace, before
end

-- ---- errors: every failure path of the device, each with its message --------------

ffi.cdef [[
  int setenv(const char *name, const char *value, int overwrite);
  int unsetenv(const char *name);
]]

-- Run fn with TBRT_VERBS_FAIL = spec (the library reads it on every call).
local function failing(spec, fn, ...)
  ffi.C.setenv("TBRT_VERBS_FAIL", spec, 1)
  local r = { n = 0 }
  local function keep(...) r.n = select("#", ...) r = { n = r.n, ... } end
  keep(pcall(fn, ...))
  ffi.C.unsetenv("TBRT_VERBS_FAIL")
  assert(r[1], r[2])
  return unpack(r, 2, r.n)
end

local function second(_, x) return x end

-- A chain of n UD sends of 8 bytes from mr to qpn through ah.
local function ud_chain(n, mr, ah, qpn)
  local sge = ffi.new("struct ibv_sge")
  sge.addr, sge.length, sge.lkey = mr.addr, 8, mr.lkey
  local wrs = ffi.new("struct ibv_send_wr[?]", n)
  for i = 0, n - 1 do
    wrs[i].wr_id = 100 + i
    wrs[i].sg_list, wrs[i].num_sge = sge, 1
    wrs[i].opcode = C.IBV_WR_SEND
    wrs[i].send_flags = C.IBV_SEND_SIGNALED
    wrs[i].wr.ud.ah = ah and C.tbrt_ah_handle(ah) or nil
    wrs[i].wr.ud.remote_qpn, wrs[i].wr.ud.remote_qkey = qpn, 0x1234
    wrs[i].next = i + 1 < n and wrs + i + 1 or nil
  end
  return wrs, sge
end

local function errors_case()
  local e = {}
  result.e = e
  local dev = assert(verbs.open("softib0"))
  local pd, cq = assert(dev:pd()), assert(dev:cq(16))
  local qp = assert(pd:qp{ type = "RC", send_cq = cq, recv_cq = cq })
  local buf = ffi.new("uint8_t[4096]")
  local mr = assert(pd:reg(buf, 4096))
  -- what the soft device underneath refuses comes back with the op named
  e.post_send_reset = second(qp:post_send{ mr = mr, len = 8 })
  e.post_recv_reset = second(qp:post_recv{ mr = mr, len = 8 })
  e.modify_bad = second(qp:modify{ state = "RTS", sq_psn = 0 })
  e.dealloc_busy = second(pd:free())
  e.destroy_cq_busy = second(cq:destroy())
  e.ah_bad_port = second(dev:ah{ pd = pd, port = 9, dgid = V.LOOPBACK })
  local entry = ffi.new("struct ibv_gid_entry")
  e.gid_negative = C.tbrt_gid_query(dev.d, 1, -1, entry) .. " " .. dev:why()
  e.gid_too_far = C.tbrt_gid_query(dev.d, 1, 999, entry) .. " " .. dev:why()
  e.vendor_err_zero = ffi.string(C.tbrt_dev_vendor_err(dev.d, 0))
  -- what the library itself fails, injected
  e.modify_negative = second(failing("ibv_modify_qp:-EINVAL", qp.modify, qp,
    { state = "INIT", port = 1, pkey_index = 0, access = verbs.ACCESS_ALL }))
  assert(qp:modify{ state = "INIT", port = 1, pkey_index = 0, access = verbs.ACCESS_ALL })
  e.post_recv = second(failing("post_recv:ENOMEM", qp.post_recv, qp, { mr = mr, len = 8 }))
  e.poll = second(failing("poll_cq:EIO", cq.poll, cq, 4))
  e.arm = failing("req_notify_cq:EIO", function()
    return C.tbrt_cq_arm(cq.c) .. " " .. dev:why()
  end)
  e.channel_fd = second(failing("comp_channel_fd:EBADF", dev.cq, dev, 8))
  e.destroy_qp = second(failing("ibv_destroy_qp:EIO", qp.destroy, qp))
  assert(qp:destroy())
  e.dereg = second(failing("ibv_dereg_mr:EIO", mr.dereg, mr))
  assert(mr:dereg())
  local ah = assert(dev:ah{ pd = pd, port = 1, dgid = V.LOOPBACK, sgid_index = V.loopback_gid(dev, 1) })
  e.destroy_ah = failing("ibv_destroy_ah:EIO", function()
    return C.tbrt_ah_destroy(ah) .. " " .. dev:why()
  end)
  assert(C.tbrt_ah_destroy(ah) == 0)
  e.destroy_cq = second(failing("ibv_destroy_cq:EIO", cq.destroy, cq))
  e.destroy_channel = second(failing("ibv_destroy_comp_channel:EIO", cq.destroy, cq))
  e.dealloc = second(failing("ibv_dealloc_pd:EIO", pd.free, pd))
  assert(pd:free())

  -- UD chains: longer than the stack copy, a bad request in the middle,
  -- an address handle of another device, a failing post
  pd, cq = assert(dev:pd()), assert(dev:cq(256))
  local x = assert(pd:qp{ type = "UD", send_cq = cq, recv_cq = cq, send_wr = 64, recv_wr = 64 })
  local y = assert(pd:qp{ type = "UD", send_cq = cq, recv_cq = cq, send_wr = 64, recv_wr = 64 })
  for _, q in ipairs { x, y } do
    assert(q:modify{ state = "INIT", port = 1, pkey_index = 0, qkey = 0x1234 })
    assert(q:modify{ state = "RTR" })
    assert(q:modify{ state = "RTS", sq_psn = 0 })
  end
  local ubuf = ffi.new("uint8_t[65536]")
  mr = assert(pd:reg(ubuf, 65536))
  for i = 0, 19 do assert(y:post_recv{ mr = mr, offset = 1024 + i * 1024, len = 1024, wr_id = i }) end
  ah = assert(dev:ah{ pd = pd, port = 1, dgid = V.LOOPBACK, sgid_index = V.loopback_gid(dev, 1) })
  local bad = ffi.new("struct ibv_send_wr *[1]")
  local wrs, keep = ud_chain(17, mr, ah, y.num)
  e.ud_chain_rc = C.tbrt_post_send(x.q, wrs, bad)
  local got = assert(cq:wait(34, 2))
  local recvs = 0
  for _, w in ipairs(got) do if w.opcode == "RECV" and w.status == "IBV_WC_SUCCESS" then recvs = recvs + 1 end end
  e.ud_chain_recvs = recvs
  wrs, keep = ud_chain(3, mr, ah, y.num)
  wrs[1].opcode = C.IBV_WR_RDMA_WRITE     -- not on UD: the device refuses it
  e.ud_bad_rc = C.tbrt_post_send(x.q, wrs, bad)
  e.ud_bad_index = bad[0] ~= nil and tonumber(ffi.cast("uintptr_t", bad[0]) -
    ffi.cast("uintptr_t", wrs)) / ffi.sizeof("struct ibv_send_wr") or -1
  e.ud_bad_why = dev:why()
  local dev2 = assert(verbs.open("softib0"))
  local pd2 = assert(dev2:pd())
  local ah2 = assert(dev2:ah{ pd = pd2, port = 1, dgid = V.LOOPBACK, sgid_index = 0 })
  wrs, keep = ud_chain(1, mr, ah2, y.num)
  e.ud_other_dev = C.tbrt_post_send(x.q, wrs, bad) .. " " .. dev:why()
  wrs, keep = ud_chain(2, mr, ah, y.num)
  e.ud_post_fail = failing("post_send:EIO", function()
    local rc = C.tbrt_post_send(x.q, wrs, bad)
    return rc .. " " .. tostring(bad[0] == wrs) .. " " .. dev:why()
  end)
  local _ = keep
  dev2:close()
  -- a library whose _ibv_query_gid_ex is not supported: untyped from then on
  local dev3 = assert(verbs.open("softib0"))
  e.untyped_too_far = failing("_ibv_query_gid_ex:EOPNOTSUPP", function()
    return C.tbrt_gid_query(dev3.d, 1, 999, entry) .. " " .. dev3:why()
  end)
  e.untyped_after = C.tbrt_gid_query(dev3.d, 1, V.loopback_gid(dev3, 1), entry)
  dev3:close()
  -- close with every destroy failing: it still gets to the context
  ours().tbrt_verbs_trace_reset()
  failing("ibv_destroy_qp:EIO,ibv_destroy_ah:EIO,ibv_dereg_mr:EIO,ibv_destroy_cq:EIO," ..
    "ibv_dealloc_pd:EIO", dev.close, dev)
  trace_report()

  -- a device without a name
  local list = failing("ibv_get_device_name:EIO", tbrt.devices)
  for _, d in ipairs(list) do if d.kind == "ibverbs" then e.nameless = d end end
  e.open_nameless = second(failing("ibv_get_device_name:EIO", verbs.open, "softib0"))
end

-- ---- link: a pair in this process --------------------------------------------

local function link_case(stride_b)
  local fa, fb = P.tcp_pair("127.0.0.1")
  local a, ca = P.probe(fa, { device = "ibverbs", timeout = 5 })
  assert(a, ca)
  local l2, cb = P.probe(fb, { device = "ibverbs", timeout = 5, stride = stride_b })
  assert(l2, cb)
  assert(P.activate_pair(a, ca, l2, cb, 5))
  result.a, result.b = P.info(a), P.info(l2)
  if stride_b then
    -- a's strides do not fit b's receives: both sides see their completion
    local n = 6000
    assert(C.tbrt_link_send(a, P.pattern(n, 1), n) == n)
    assert(C.tbrt_link_flush(a) == 0)
    local buf = ffi.new("uint8_t[?]", n)
    local ea, eb = 0, 0
    local deadline = uv.hrtime() / 1e9 + 3
    while (ea == 0 or eb == 0) and uv.hrtime() / 1e9 < deadline do
      if ea == 0 then ea = math.min(C.tbrt_link_progress(a), 0) end
      if eb == 0 then
        local r = tonumber(C.tbrt_link_recv(l2, buf, n))
        if r < 0 and r ~= -11 then eb = r end
      end
    end
    result.err_a, result.why_a = ffi.string(C.tbrt_errname(ea)), P.why(a)
    result.err_b, result.why_b = ffi.string(C.tbrt_errname(eb)), P.why(l2)
  else
    local ok, err = P.transfer(a, l2, 1000003, 1, 5)
    result.a_to_b = ok and "ok" or err
    ok, err = P.transfer(l2, a, 700001, 2, 5)
    result.b_to_a = ok and "ok" or err
  end
  C.tbrt_link_close(a)
  C.tbrt_link_close(l2)
  result.teardown_a = ffi.string(C.tbrt_link_teardown(a))
  result.teardown_b = ffi.string(C.tbrt_link_teardown(l2))
  trace_report()
end

-- ---- two processes ----------------------------------------------------------------

local SIZE = 3 * 1024 * 1024 + 12345

local function two_process(role, port_file)
  local opts = { device = "ibverbs", timeout = 10, fallback = false,
    framing = os.getenv("TBRT_SHIM_FRAMING") }   -- llama_wire_spec.lua: the llama framings
  local l, err
  if role == "serve" then
    local srv = assert(tbrt.listen("127.0.0.1", 0, opts))
    local tmp = port_file .. ".tmp"
    local f = assert(io.open(tmp, "w"))
    f:write(tostring(srv.port))
    f:close()
    assert(os.rename(tmp, port_file))
    l, err = srv:accept(10)
    srv:close()
  else
    local port
    local deadline = uv.hrtime() / 1e9 + 10
    repeat
      local f = io.open(port_file)
      if f then port = tonumber(f:read("*a")) f:close() else tbrt.sleep(0.01) end
    until port or uv.hrtime() / 1e9 > deadline
    assert(port, "no port file " .. port_file)
    l, err = tbrt.connect("127.0.0.1", port, opts)
  end
  assert(l, err)
  result.info = l:info()
  local function send(seed)
    local n, e = l:send(P.pattern(SIZE, seed), SIZE)
    assert(n == SIZE, e)
    assert(l:flush())
  end
  local function recv(seed)
    local buf = ffi.new("uint8_t[?]", SIZE)
    local n, e = l:recv_into(buf, SIZE, 10)
    assert(n == SIZE, e)
    local at = P.first_diff(P.pattern(SIZE, seed), buf, SIZE)
    return at and ("byte " .. at .. " differs") or "ok"
  end
  if role == "serve" then
    send(11)
    result.received = recv(12)
  else
    result.received = recv(11)
    send(12)
  end
  assert(l:close())
  result.teardown = l:teardown()
  trace_report()
end

if mode == "list" then list()
elseif mode == "verbs" then verbs_case(tonumber(arg[2]) or 1)
elseif mode == "errors" then errors_case()
elseif mode == "link" then link_case(tonumber(arg[2]))
elseif mode == "serve" or mode == "connect" then two_process(mode, arg[2])
else error("child.lua: unknown mode " .. tostring(mode)) end

io.stdout:write("RESULT ", cjson.encode(result), "\n")
io.stdout:flush()
