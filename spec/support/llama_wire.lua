-- llama_wire.lua - a spec-only stand-in for llama.cpp's ggml-rpc RDMA
-- transports, written from the facts of issue 12 (not from llama.cpp's code,
-- and sharing nothing with tbrt's engine): it drives a device through the
-- verbs tier (tbrt.verbs plus the raw calls for what that module does not
-- set), as llama.cpp drives libibverbs, and keeps the bootstrap socket as a
-- blocking libc socket, as llama.cpp does.
--
--   apple: 16 strides of 128 KiB per direction; a stride is {u32 "RSEG"
--          magic, u32 len, payload <= 131064}, the whole stride posted per
--          SEND; the receiver checks magic and len <= payload only; UC,
--          PSN 0, receives posted after RTS; the first ACTIVE port; one
--          readiness byte each way (0x2A, 0x00 on failure); after that any
--          readability of the socket means the peer is gone.
--   linux: no header; a send call goes as SENDs of <= 256 KiB, each posted
--          after the previous completed, inline when <= the granted inline
--          size (256 asked); 24 receives of 256 KiB posted at INIT before
--          RTR; a read takes one completion per SEND (a SEND larger than
--          what is left to read is an error here: llama.cpp would overrun
--          its buffer); RC with min_rnr_timer 1, timeout 14, retry 7, rnr 7;
--          port 1 whatever its state; psn = qpn & 0xffffff; no readiness.
-- A transport whose device has no usable port or GID advertises all-zero
-- caps, and both sides then stay on the plain socket.
local ffi = require("ffi")
local bit = require("bit")
local core = require("tbrt.ffi")
local verbs = require("tbrt.verbs")

local C = core.C
local M = {}

ffi.cdef [[
  struct llw_sockaddr_in { uint16_t family; uint16_t port; uint32_t addr; uint8_t zero[8]; };
  struct llw_pollfd { int fd; short events; short revents; };
  int socket(int domain, int type, int protocol);
  int connect(int fd, const void *addr, unsigned len);
  int bind(int fd, const void *addr, unsigned len);
  int listen(int fd, int backlog);
  int accept(int fd, void *addr, void *len);
  int getsockname(int fd, void *addr, unsigned *len);
  int setsockopt(int fd, int level, int name, const void *val, unsigned len);
  long send(int fd, const void *buf, size_t len, int flags);
  long recv(int fd, void *buf, size_t len, int flags);
  int poll(struct llw_pollfd *fds, unsigned long n, int timeout);
  int close(int fd);
]]

local AF_INET, SOCK_STREAM, SOL_SOCKET, SO_REUSEADDR = 2, 1, 1, 2
local IPPROTO_TCP, TCP_NODELAY, MSG_NOSIGNAL = 6, 1, 0x4000
local POLLIN, POLLERR, POLLHUP, POLLRDHUP = 1, 8, 16, 0x2000
local LOOPBACK = 0x0100007f     -- 127.0.0.1 in network order, as it lies in memory

M.ZERO_CAPS = string.rep("\0", 24)

local function now()
  return require("tbrt.link").now()
end

local function htons(n) return bit.bor(bit.lshift(bit.band(n, 255), 8), bit.rshift(n, 8)) end

---------------------------------------------------------------------------
-- The bootstrap socket (blocking, bounded by poll).

local Sock = {}
Sock.__index = Sock

local function wait_fd(fd, events, timeout)
  local p = ffi.new("struct llw_pollfd[1]")
  p[0].fd, p[0].events = fd, events
  local r = ffi.C.poll(p, 1, math.max(0, math.floor(timeout * 1000)))
  return r > 0, p[0].revents
end

local function sockaddr(port)
  local a = ffi.new("struct llw_sockaddr_in")
  a.family, a.port, a.addr = AF_INET, htons(port), LOOPBACK
  return a
end

function M.listen()
  local fd = ffi.C.socket(AF_INET, SOCK_STREAM, 0)
  local one = ffi.new("int[1]", 1)
  ffi.C.setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, one, 4)
  local a = sockaddr(0)
  assert(ffi.C.bind(fd, a, ffi.sizeof(a)) == 0, "bind")
  assert(ffi.C.listen(fd, 1) == 0, "listen")
  local len = ffi.new("unsigned[1]", ffi.sizeof(a))
  ffi.C.getsockname(fd, a, len)
  return fd, htons(a.port)
end

function M.accept(lfd, timeout)
  if not wait_fd(lfd, POLLIN, timeout) then error("accept: nobody connected within " .. timeout .. " s", 0) end
  local fd = ffi.C.accept(lfd, nil, nil)
  assert(fd >= 0, "accept")
  return M.wrap(fd)
end

function M.connect(port)
  local fd = ffi.C.socket(AF_INET, SOCK_STREAM, 0)
  local a = sockaddr(port)
  if ffi.C.connect(fd, a, ffi.sizeof(a)) ~= 0 then error("connect 127.0.0.1:" .. port .. " failed", 0) end
  return M.wrap(fd)
end

function M.wrap(fd)
  local one = ffi.new("int[1]", 1)
  ffi.C.setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, one, 4)
  return setmetatable({ fd = fd }, Sock)
end

-- The socket's local address as a GID (::ffff:a.b.c.d).
function Sock:local_gid()
  local a = ffi.new("struct llw_sockaddr_in")
  local len = ffi.new("unsigned[1]", ffi.sizeof(a))
  ffi.C.getsockname(self.fd, a, len)
  return string.rep("\0", 10) .. "\255\255" .. ffi.string(ffi.cast("uint8_t *", a) + 4, 4)
end

function Sock:send(s)
  local p, off = ffi.cast("const char *", s), 0
  while off < #s do
    local n = tonumber(ffi.C.send(self.fd, p + off, #s - off, MSG_NOSIGNAL))
    if n <= 0 then error("bootstrap socket: send failed", 0) end
    off = off + n
  end
end

-- Exactly n bytes, or nil at EOF / after the deadline.
function Sock:recv(n, timeout)
  local buf, off = ffi.new("char[?]", math.max(n, 1)), 0
  local deadline = now() + timeout
  while off < n do
    if not wait_fd(self.fd, POLLIN, deadline - now()) then return nil, "timeout" end
    local r = tonumber(ffi.C.recv(self.fd, buf + off, n - off, 0))
    if r <= 0 then return nil, "EOF" end
    off = off + r
  end
  return ffi.string(buf, n)
end

-- Anything at all on the socket (Apple's rule once a link is up).
function Sock:readable()
  local ok = wait_fd(self.fd, POLLIN, 0)
  return ok
end

-- The peer hung up (Linux's rule: POLLRDHUP, POLLHUP or POLLERR only).
function Sock:hung_up()
  local ok, ev = wait_fd(self.fd, POLLRDHUP, 0)
  return ok and bit.band(ev, POLLRDHUP + POLLHUP + POLLERR) ~= 0
end

function Sock:close()
  if self.fd then ffi.C.close(self.fd) self.fd = nil end
end

---------------------------------------------------------------------------
-- Verbs pieces the verbs module leaves at its own defaults.

local function le32(n)
  return string.char(n % 256, math.floor(n / 256) % 256, math.floor(n / 65536) % 256,
    math.floor(n / 16777216) % 256)
end
local function rd32(s, i) local a, b, c, d = s:byte(i, i + 3) return a + b * 256 + c * 65536 + d * 16777216 end

local function modify(dev, qp, a, mask, what)
  local rc = C.tbrt_qp_modify(qp.q, a, mask)
  if rc ~= 0 then return nil, what .. ": " .. ffi.string(C.tbrt_dev_why(dev.d)) end
  return true
end

-- RTR with llama.cpp's address vector: GRH, hop limit 1, the port's MTU.
local function rtr(t, peer_qpn, peer_psn, peer_gid, lid, extra)
  local a = ffi.new("struct ibv_qp_attr")
  a.qp_state = C.IBV_QPS_RTR
  a.path_mtu = t.mtu
  a.dest_qp_num = peer_qpn
  a.rq_psn = peer_psn
  a.ah_attr.is_global = 1
  a.ah_attr.port_num = t.port
  a.ah_attr.dlid = lid
  a.ah_attr.grh.hop_limit = 1
  a.ah_attr.grh.sgid_index = t.gid_index
  ffi.copy(a.ah_attr.grh.dgid.raw, peer_gid, 16)
  local mask = bit.bor(C.IBV_QP_STATE, C.IBV_QP_AV, C.IBV_QP_PATH_MTU, C.IBV_QP_DEST_QPN,
    C.IBV_QP_RQ_PSN)
  if extra then
    a.max_dest_rd_atomic, a.min_rnr_timer = 1, 1
    mask = bit.bor(mask, C.IBV_QP_MAX_DEST_RD_ATOMIC, C.IBV_QP_MIN_RNR_TIMER)
  end
  return modify(t.dev, t.qp, a, mask, "RTR")
end

local function post_send(t, addr, len, lkey, wr_id, inline)
  local sge = ffi.new("struct ibv_sge")
  sge.addr, sge.length, sge.lkey = ffi.cast("uintptr_t", addr), len, lkey or 0
  local wr = ffi.new("struct ibv_send_wr")
  wr.wr_id, wr.sg_list, wr.num_sge, wr.opcode = wr_id, sge, 1, C.IBV_WR_SEND
  wr.send_flags = bit.bor(C.IBV_SEND_SIGNALED, inline and C.IBV_SEND_INLINE or 0)
  local rc = C.tbrt_post_send(t.qp.q, wr, nil)
  if rc ~= 0 then error("post_send: " .. ffi.string(C.tbrt_dev_why(t.dev.d)), 0) end
end

local function first_gid(dev, port, target)
  local gids = dev:gids(port) or {}
  local best
  for _, g in ipairs(gids) do
    if g.gid == target and (not best or g.type == "RoCEv2") then best = g end
  end
  return best
end

local function open(t, opts)
  local dev, err = verbs.open(opts.device or "soft0", { personality = opts.personality })
  if not dev then error(err, 0) end
  t.dev = dev
  t.pd = assert(dev:pd())
end

---------------------------------------------------------------------------
-- Apple.

local A = { NBUF = 16, STRIDE = 128 * 1024, HDR = 8, MAGIC = 0x52534547, RECV = 2 ^ 20 }
A.PAYLOAD = A.STRIDE - A.HDR
A.QP_WR = A.NBUF * (A.STRIDE / 4096)
local Apple = {}
Apple.__index = Apple

function M.apple(sock, opts)
  return setmetatable({ sock = sock, opts = opts, timeout = opts.timeout or 20, kind = "apple" }, Apple)
end

-- Returns this side's caps (all zero: no RDMA here).
function Apple:probe()
  open(self, self.opts)
  local dev, port, pa = self.dev, nil, nil
  for p = 1, dev:query().phys_port_cnt do
    local a = dev:port(p)
    if a and a.state == "ACTIVE" then port, pa = p, a break end
  end
  local g = port and first_gid(dev, port, self.sock:local_gid())
  if not g then return M.ZERO_CAPS end
  self.port, self.gid_index, self.mtu, self.lid = port, g.index, pa.raw.active_mtu, pa.lid
  self.cq = assert(dev:cq(2 * A.QP_WR + 1))
  self.qp = assert(self.pd:qp { type = "UC", send_cq = self.cq, recv_cq = self.cq,
    send_wr = A.QP_WR, recv_wr = A.QP_WR })
  assert(self.qp:modify { state = "INIT", port = port, pkey_index = 0, access = verbs.ACCESS_ALL })
  self.smem = ffi.new("uint8_t[?]", A.NBUF * A.STRIDE)
  self.rmem = ffi.new("uint8_t[?]", A.NBUF * A.STRIDE)
  self.smr = assert(self.pd:reg(self.smem, A.NBUF * A.STRIDE, verbs.ACCESS_ALL))
  self.rmr = assert(self.pd:reg(self.rmem, A.NBUF * A.STRIDE, verbs.ACCESS_ALL))
  self.busy, self.inq, self.pend = {}, {}, nil
  return le32(self.qp.num) .. string.char(self.lid % 256, math.floor(self.lid / 256)) .. "\0\0" .. g.gid
end

function Apple:activate(peer)
  local ok, err = rtr(self, rd32(peer, 1), 0, peer:sub(9, 24), peer:byte(5) + peer:byte(6) * 256)
  if ok then
    local a = ffi.new("struct ibv_qp_attr")
    a.qp_state, a.sq_psn = C.IBV_QPS_RTS, 0
    ok, err = modify(self.dev, self.qp, a, bit.bor(C.IBV_QP_STATE, C.IBV_QP_SQ_PSN), "RTS")
  end
  for i = 0, A.NBUF - 1 do
    if not ok then break end
    ok, err = self.qp:post_recv { mr = self.rmr, offset = i * A.STRIDE, len = A.STRIDE, wr_id = A.RECV + i }
  end
  self.sock:send(string.char(ok and 0x2A or 0))
  local b = self.sock:recv(1, self.timeout)
  if not ok then return nil, err end
  if b ~= "\42" then return nil, "the peer's readiness byte is " .. tostring(b and b:byte()) end
  self.rdma = true
  return true
end

function Apple:progress()
  for _, w in ipairs(assert(self.cq:poll(32))) do
    if w.status ~= "IBV_WC_SUCCESS" then error("RDMA(Apple) wc error: " .. w.status, 0) end
    if w.wr_id >= A.RECV then
      local b = w.wr_id - A.RECV
      local at = self.rmem + b * A.STRIDE
      local h = ffi.cast("uint32_t *", at)
      if h[0] ~= A.MAGIC then error(string.format("RDMA(Apple) bad frame magic 0x%x", h[0]), 0) end
      if h[1] > A.PAYLOAD then error("RDMA(Apple) frame len " .. h[1] .. " exceeds payload", 0) end
      self.inq[#self.inq + 1] = { buf = b, off = 0, len = h[1] }
    else
      self.busy[w.wr_id] = nil
    end
  end
end

function Apple:post_pending()
  local i = self.pend
  if not i then return end
  local h = ffi.cast("uint32_t *", self.smem + i * A.STRIDE)
  h[0], h[1] = A.MAGIC, self.pend_len
  post_send(self, self.smem + i * A.STRIDE, A.STRIDE, self.smr.lkey, i)   -- the whole stride
  self.busy[i], self.pend = true, nil
end

function Apple:send(s)
  if not self.rdma then return self.sock:send(s) end
  local p, off, deadline = ffi.cast("const uint8_t *", s), 0, now() + self.timeout
  while off < #s do
    while not self.pend do
      for k = 0, A.NBUF - 1 do
        if not self.busy[k] then self.pend, self.pend_len = k, 0 break end
      end
      if not self.pend then
        self:progress()
        if now() > deadline then error("send: no free stride within " .. self.timeout .. " s", 0) end
      end
    end
    local n = math.min(#s - off, A.PAYLOAD - self.pend_len)
    ffi.copy(self.smem + self.pend * A.STRIDE + A.HDR + self.pend_len, p + off, n)
    self.pend_len, off = self.pend_len + n, off + n
    if self.pend_len == A.PAYLOAD then self:post_pending() end
  end
end

function Apple:flush()
  if self.rdma then self:post_pending() end
end

-- Exactly n bytes; nil, "peer gone" when the socket stirs while waiting.
function Apple:recv(n)
  if not self.rdma then return self.sock:recv(n, self.timeout) end
  self:post_pending()           -- turnaround
  local out, got, deadline, idle = ffi.new("uint8_t[?]", math.max(n, 1)), 0, now() + self.timeout, 0
  while got < n do
    local q = self.inq[1]
    if not q then
      self:progress()
      idle = idle + 1
      if idle % 1024 == 0 then
        if self.sock:readable() then return nil, "peer gone" end
        if now() > deadline then return nil, "timeout" end
      end
    else
      local k = math.min(n - got, q.len - q.off)
      ffi.copy(out + got, self.rmem + q.buf * A.STRIDE + A.HDR + q.off, k)
      got, q.off = got + k, q.off + k
      if q.off == q.len then
        table.remove(self.inq, 1)
        assert(self.qp:post_recv { mr = self.rmr, offset = q.buf * A.STRIDE, len = A.STRIDE,
          wr_id = A.RECV + q.buf })
      end
    end
  end
  return ffi.string(out, n)
end

---------------------------------------------------------------------------
-- Linux.

local X = { CHUNK = 256 * 1024, RX = 24, INLINE = 256 }
local Linux = {}
Linux.__index = Linux

function M.linux(sock, opts)
  return setmetatable({ sock = sock, opts = opts, timeout = opts.timeout or 20, kind = "linux" }, Linux)
end

function Linux:probe()
  open(self, self.opts)
  local dev = self.dev
  local pa = dev:port(1)            -- port 1, hard-coded, its state not looked at
  local g = pa and first_gid(dev, 1, self.sock:local_gid())
  if not g then return M.ZERO_CAPS end
  self.port, self.gid_index, self.mtu = 1, g.index, pa.raw.active_mtu
  self.scq, self.rcq = assert(dev:cq(16)), assert(dev:cq(X.RX + 4))
  local qp, err = self.pd:qp { type = "RC", send_cq = self.scq, recv_cq = self.rcq, send_wr = 4,
    recv_wr = X.RX + 4, inline = X.INLINE }
  if not qp then error(err, 0) end
  self.qp = qp
  self.max_inline = qp.q.cap.max_inline_data
  self.tx = ffi.new("uint8_t[?]", X.CHUNK)
  self.rx = ffi.new("uint8_t[?]", X.RX * X.CHUNK)
  self.txmr = assert(self.pd:reg(self.tx, X.CHUNK, verbs.LOCAL_WRITE))
  self.rxmr = assert(self.pd:reg(self.rx, X.RX * X.CHUNK,
    bit.bor(verbs.LOCAL_WRITE, C.IBV_ACCESS_REMOTE_WRITE)))
  self.psn = bit.band(qp.num, 0xffffff)
  self.inline_sends = 0
  return le32(qp.num) .. le32(self.psn) .. g.gid
end

function Linux:activate(peer)
  local ok, err = self.qp:modify { state = "INIT", port = 1, pkey_index = 0, access = verbs.ACCESS_ALL }
  for i = 0, X.RX - 1 do
    if not ok then break end
    ok, err = self.qp:post_recv { mr = self.rxmr, offset = i * X.CHUNK, len = X.CHUNK, wr_id = i }
  end
  if ok then ok, err = rtr(self, rd32(peer, 1), rd32(peer, 5), peer:sub(9, 24), 0, true) end
  if ok then
    local a = ffi.new("struct ibv_qp_attr")
    a.qp_state, a.timeout, a.retry_cnt, a.rnr_retry = C.IBV_QPS_RTS, 14, 7, 7
    a.sq_psn, a.max_rd_atomic = self.psn, 1
    ok, err = modify(self.dev, self.qp, a, bit.bor(C.IBV_QP_STATE, C.IBV_QP_TIMEOUT,
      C.IBV_QP_RETRY_CNT, C.IBV_QP_RNR_RETRY, C.IBV_QP_SQ_PSN, C.IBV_QP_MAX_QP_RD_ATOMIC), "RTS")
  end
  if not ok then return nil, err end
  self.rdma = true
  return true
end

-- One completion from cq, bounded, watching the socket for a hang-up.
function Linux:poll(cq)
  local deadline, spins = now() + self.timeout, 0
  while true do
    local w = assert(cq:poll(1))[1]
    if w then
      if w.status ~= "IBV_WC_SUCCESS" then return nil, "RDMA CQ wc error: " .. w.status end
      return w
    end
    spins = spins + 1
    if spins % 1024 == 0 then
      if self.sock:hung_up() then return nil, "peer gone" end
      if now() > deadline then return nil, "timeout" end
    end
  end
end

function Linux:send(s)
  if not self.rdma then return self.sock:send(s) end
  local p, off = ffi.cast("const uint8_t *", s), 0
  while off < #s do
    local n = math.min(#s - off, X.CHUNK)
    if n <= self.max_inline then
      post_send(self, p + off, n, 0, 0, true)
      self.inline_sends = self.inline_sends + 1
    else
      ffi.copy(self.tx, p + off, n)
      post_send(self, self.tx, n, self.txmr.lkey, 0, false)
    end
    local w, err = self:poll(self.scq)        -- stop and wait
    if not w then error("send: " .. err, 0) end
    off = off + n
  end
end

function Linux:flush() end

function Linux:recv(n)
  if not self.rdma then return self.sock:recv(n, self.timeout) end
  local out, got = ffi.new("uint8_t[?]", math.max(n, 1)), 0
  while got < n do
    local w, err = self:poll(self.rcq)
    if not w then return nil, err end
    if w.byte_len > n - got then
      error(string.format("a SEND of %d bytes for a read of %d: llama.cpp would overrun its buffer",
        w.byte_len, n - got), 0)
    end
    ffi.copy(out + got, self.rx + w.wr_id * X.CHUNK, w.byte_len)
    got = got + w.byte_len
    assert(self.qp:post_recv { mr = self.rxmr, offset = w.wr_id * X.CHUNK, len = X.CHUNK, wr_id = w.wr_id })
  end
  return ffi.string(out, n)
end

M.u32, M.rd32 = le32, rd32
return M
