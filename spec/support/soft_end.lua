-- soft_end.lua - one end of a soft-device queue pair in a process of its own,
-- driven line by line from stdin (spec/support/soft_ends.lua starts it):
--   tbrt spec/support/soft_end.lua
-- Each request is a JSON object on one line, each reply one JSON line:
--   {"op":"open","personality":"linux-rc","type":"RC"}   -> {qpn, pid, send_mr, recv_mr}
--   {"op":"connect","qpn":N,...}                         -> {ok}     (INIT, RTR, RTS)
--   {"op":"post_recv","len":64}  {"op":"post_send","len":64,"inline":true,"ud_qpn":N}
--   {"op":"poll","n":1,"timeout":1}                      -> {wcs = {{status, why, ...}}}
--   {"op":"fetch_add","n":N,"rkey":K,"raddr":A}  N atomics one after another -> {ok}
--   {"op":"set_port","port":1,"state":"down"|"active"|0}
--   {"op":"read","offset":0,"len":8}                     -> {data} (the receive buffer)
--   "open" also takes "atomic":true (REMOTE_ATOMIC) and "iova":"N" for the receive MR
--   {"op":"state"} {"op":"ping"} {"op":"exit"}
--   {"op":"fill","buf":"send","byte":90}  {"op":"peek","buf":"recv","off":0,"len":8} -> {bytes}
--   {"op":"stats","qpn":N} -> {stats} (the device's; one QP's with qpn)
--   {"op":"stream_send"|"stream_recv","n":N,"len":L}  N messages, every byte checked
-- Across namespaces (the UDP wire): open takes "addr" (this end's IPv4
-- address: its GID is the source) and "wire"; connect takes "peer_addr";
-- post_send takes "ud_addr" (the UD destination's address).
-- A failed call replies {err = "ECODE: ..."}; the process lives on, which is
-- what the specs that scribble on its shared memory check.
local cjson = require("cjson")
local ffi = require("ffi")
local verbs = require("tbrt.verbs")

local LOOPBACK = string.rep("\0", 10) .. "\255\255\127\0\0\1"
local e = {}

local function gid_of(addr)
  if not addr then return LOOPBACK end
  local a, b, c, d = addr:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
  return string.rep("\0", 10) .. "\255\255" .. string.char(tonumber(a), tonumber(b), tonumber(c), tonumber(d))
end

local function gid_index(dev, port, gid)
  local best
  for _, g in ipairs(assert(dev:gids(port))) do
    if g.gid == gid and (not best or g.type == "RoCEv2") then best = g.index end
  end
  return best
end

local function loopback_gid(dev, port) return gid_index(dev, port, LOOPBACK) end

local ops = {}

function ops.open(r)
  local dev, err = verbs.open(r.device or "soft0", { personality = r.personality, wire = r.wire })
  if not dev then return { err = err } end
  e.dev, e.type = dev, r.type or "RC"
  e.port = r.port or (dev.personality == "apple-uc" and 2 or 1)
  e.pd = assert(dev:pd())
  e.cq = assert(dev:cq(64))
  local depth = r.depth or 16
  e.qp = assert(e.pd:qp{ type = e.type, send_cq = e.cq, recv_cq = e.cq, send_wr = depth,
    recv_wr = depth, inline = 64 })
  local len = r.mr_len or 65536
  e.sbuf, e.rbuf = ffi.new("uint8_t[?]", len), ffi.new("uint8_t[?]", len)
  ffi.fill(e.sbuf, len, 0x5a)
  local access = r.atomic and bit.bor(verbs.ACCESS_ALL, verbs.ACCESS_ATOMIC) or nil
  -- send_access "local": a send MR no peer may read or write
  e.smr = assert(e.pd:reg(e.sbuf, len, r.send_access == "local" and verbs.LOCAL_WRITE or nil))
  e.rmr = assert(e.pd:reg(e.rbuf, len, access, r.iova and tonumber(r.iova) or nil))
  e.gid = gid_of(r.addr)
  e.sgid = gid_index(dev, e.port, e.gid)
  if not e.sgid then return { err = "no GID for " .. tostring(r.addr) .. " on port " .. e.port } end
  if e.type == "UD" then
    assert(e.qp:modify{ state = "INIT", port = e.port, pkey_index = 0, qkey = 0x11 })
    assert(e.qp:modify{ state = "RTR" })
    assert(e.qp:modify{ state = "RTS", sq_psn = 0 })
    e.ah = assert(dev:ah{ pd = e.pd, port = e.port, dgid = LOOPBACK, sgid_index = e.sgid })
  end
  return { qpn = e.qp.num, pid = ffi.C.getpid(), send_key = e.smr.lkey, recv_key = e.rmr.lkey,
    recv_addr = string.format("%.0f", tonumber(e.rmr.addr)),  -- a string: JSON keeps 14 digits
    send_addr = string.format("%.0f", tonumber(e.smr.addr)) }
end

function ops.connect(r)
  local q = e.qp
  local ok, err = q:modify{ state = "INIT", port = e.port, pkey_index = 0, access = verbs.ACCESS_ALL }
  if not ok then return { err = err } end
  local rtr = { state = "RTR", mtu = r.mtu or 1024, dest_qpn = r.qpn, rq_psn = 0, dgid = gid_of(r.peer_addr),
    sgid_index = e.sgid, ah_port = e.port }
  local rts = { state = "RTS", sq_psn = 0 }
  if e.type == "RC" then
    rtr.min_rnr_timer, rtr.max_dest_rd_atomic = r.min_rnr_timer or 1, 1
    rts.timeout, rts.retry_cnt, rts.rnr_retry, rts.max_rd_atomic =
      r.timeout or 10, r.retry_cnt or 2, r.rnr_retry or 7, 1
  end
  ok, err = q:modify(rtr)
  if ok then ok, err = q:modify(rts) end
  if not ok then return { err = err } end
  return { ok = true }
end

function ops.post_recv(r)
  local ok, err = e.qp:post_recv{ mr = e.rmr, offset = r.offset, len = r.len or 64,
    wr_id = r.wr_id or 1 }
  return ok and { ok = true } or { err = err }
end

function ops.post_send(r)
  local t = { mr = e.smr, len = r.len or 64, wr_id = r.wr_id or 2, inline = r.inline,
    opcode = r.opcode }
  if r.ud_qpn then
    t.ah, t.remote_qpn, t.remote_qkey = e.ah, r.ud_qpn, 0x11
    if r.ud_addr then
      t.ah = assert(e.dev:ah{ pd = e.pd, port = e.port, dgid = gid_of(r.ud_addr), sgid_index = e.sgid })
    end
  end
  t.imm = r.imm
  if r.opcode and r.opcode:match("^RDMA") then t.rkey, t.raddr = r.rkey, tonumber(r.raddr) end
  local ok, err = e.qp:post_send(t)
  return ok and { ok = true } or { err = err }
end

function ops.poll(r)
  local wcs, err = e.cq:wait(r.n or 1, r.timeout or 1)
  if not wcs then return { err = err } end
  for _, w in ipairs(wcs) do w.byte_len = tonumber(w.byte_len) ; w.vendor_err = tonumber(w.vendor_err) end
  return { wcs = wcs }
end

-- poll, answer, and exit at once, as a program that returns from main
-- after its last receive: C's exit, its device open, no Lua teardown
function ops.poll_exit(r)
  local res = ops.poll(r)
  io.stdout:write(cjson.encode(res), "\n")
  io.stdout:flush()
  os.exit(0, false)
end

function ops.fetch_add(r)
  for i = 1, r.n do
    local ok, err = e.qp:post_send{ mr = e.smr, len = 8, wr_id = i, opcode = "FETCH_AND_ADD",
      rkey = r.rkey, raddr = tonumber(r.raddr), compare_add = r.add or 1 }
    if not ok then return { err = err } end
    local wcs = e.cq:wait(1, 5)
    if not wcs or #wcs ~= 1 or wcs[1].status ~= "IBV_WC_SUCCESS" then
      return { err = "atomic " .. i .. ": " .. cjson.encode(wcs or {}) }
    end
  end
  return { ok = true }
end

function ops.read(r)
  return { data = ffi.string(e.rbuf + (r.offset or 0), r.len or 8) }
end

function ops.set_port(r)
  local ok, err = e.dev:set_port(r.port, r.state)
  return ok and { ok = true } or { err = err }
end

function ops.state() return { state = e.qp:state() } end
function ops.fill(r)
  ffi.fill(r.buf == "recv" and e.rbuf or e.sbuf, r.len or 65536, r.byte or 0)
  return { ok = true }
end
function ops.peek(r)
  local b = r.buf == "send" and e.sbuf or e.rbuf
  local t = {}
  for i = 0, (r.len or 1) - 1 do t[#t + 1] = b[(r.off or 0) + i] end
  return { bytes = t }
end
function ops.stats(r) return { stats = e.dev:stats(r.qpn) } end

-- A stream of n messages of len bytes each way, every byte checked: the
-- sender's buffer holds pattern(i) = (i * 7 + 3) % 256, the receiver
-- clears its buffer before each receive and compares after it.
local function pattern(buf, len)
  for i = 0, len - 1 do buf[i] = (i * 7 + 3) % 256 end
end

function ops.stream_send(r)
  pattern(e.sbuf, r.len)
  for i = 1, r.n do
    local ok, err = e.qp:post_send{ mr = e.smr, len = r.len, wr_id = i }
    if not ok then return { err = err } end
    local wcs, werr = e.cq:wait(1, r.timeout or 5)
    if not wcs then return { err = "send " .. i .. ": " .. tostring(werr) } end
    if wcs[1].status ~= "IBV_WC_SUCCESS" then
      return { err = "send " .. i .. ": " .. wcs[1].status .. ": " .. tostring(wcs[1].why) }
    end
  end
  return { ok = true }
end

function ops.stream_recv(r)
  local want = ffi.new("uint8_t[?]", r.len)
  pattern(want, r.len)
  for i = 1, r.n do
    ffi.fill(e.rbuf, r.len, 0)
    local ok, err = e.qp:post_recv{ mr = e.rmr, len = r.len, wr_id = i }
    if not ok then return { err = err } end
    local wcs, werr = e.cq:wait(1, r.timeout or 5)
    if not wcs then return { err = "receive " .. i .. ": " .. tostring(werr) } end
    if wcs[1].status ~= "IBV_WC_SUCCESS" or tonumber(wcs[1].byte_len) ~= r.len then
      return { err = "receive " .. i .. ": " .. wcs[1].status .. ", " ..
        tostring(wcs[1].byte_len) .. " bytes: " .. tostring(wcs[1].why) }
    end
    if ffi.C.memcmp(e.rbuf, want, r.len) ~= 0 then
      for k = 0, r.len - 1 do
        if e.rbuf[k] ~= want[k] then
          return { err = string.format("receive %d: byte %d is %d, not %d", i, k, e.rbuf[k],
            want[k]) }
        end
      end
    end
  end
  return { ok = true }
end
function ops.ping() return { pong = true } end

ffi.cdef [[ int getpid(void); ]]
pcall(ffi.cdef, [[ int memcmp(const void *, const void *, size_t); ]])
io.stdout:setvbuf("line")
for line in io.lines() do
  local req = cjson.decode(line)
  if req.op == "exit" then break end
  local f = ops[req.op]
  local ok, res = pcall(f or function() error("no such op " .. tostring(req.op)) end, req)
  if not ok then res = { err = "lua: " .. tostring(res) } end
  io.stdout:write(cjson.encode(res), "\n")
end
