-- tbrt/link.lua - links as Lua objects, in the cosocket shape, over the core.
--
--   local l = assert(link.probe(sock, opts))      -- device, QP, rings; l:caps()
--   assert(l:activate(peer_caps))                 -- RTR/RTS + readiness byte
--   l:send(data) ; l:flush()                      -- bytes, err
--   l:register(buf, len)                          -- sends of >= 32 KiB from it go
--                                                 -- direct (the peer reads them)
--   local data, err, partial = l:recv(n)          -- exactly n bytes
--   l:close()
--
-- Every call that waits does it as a task on the loop: it spins on the
-- core's progress while there is progress (up to opts.spin seconds without
-- any by default, as the core decides: tbrt_link_idle), then arms the
-- completion queue and parks on its fd (task.poll) or a short timer, so
-- other tasks, timers and links keep running. Data may be a
-- Lua string or a cdata pointer with a length (no copy in between).
-- Errors: nil, "ECODE: link N: ..." (luv style); misuse raises.
local ffi = require("ffi")
local core = require("tbrt.ffi")
local task = require("tbrt.task")
require("tbrt.libc")

local C = core.C
local M = {}

-- The monotonic clock, read without making garbage: a 64-bit field read
-- outside compiled code boxes an int64 cdata, so on a little-endian LP64
-- machine the two longs are read as 32-bit words instead (tv_nsec < 1e9
-- fits the low word). perf.measure takes a timestamp per iteration.
ffi.cdef [[
  struct tbrt_timespec { long tv_sec; long tv_nsec; };
  union tbrt_timespec_words { struct tbrt_timespec ts; uint32_t w[4]; };
  int clock_gettime(int clk, struct tbrt_timespec *ts);
]]
local CLOCK_MONOTONIC = 1
local now
if ffi.abi("le") and ffi.abi("64bit") and ffi.sizeof("long") == 8 then
  -- tw itself is kept in M: the pointer and the array view do not keep
  -- the memory they point into alive
  local tw = ffi.new("union tbrt_timespec_words")
  M._clock_words = tw
  local tsp = ffi.cast("struct tbrt_timespec *", tw)
  local w = ffi.cast("uint32_t *", tw)
  now = function()
    ffi.C.clock_gettime(CLOCK_MONOTONIC, tsp)
    return w[0] + w[1] * 4294967296 + w[2] * 1e-9
  end
else
  local ts = ffi.new("struct tbrt_timespec")
  now = function()
    ffi.C.clock_gettime(CLOCK_MONOTONIC, ts)
    return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
  end
end
M.now = now

local EAGAIN = -11
-- Looks a recv takes in C before its first wait turn (recv_into): as many as
-- _wait takes between its looks at the clock and the other tasks, so a task
-- holds the loop no longer than a wait turn's round does. (On tcp the core
-- looks once: a look there is a system call.)
local RECV_LOOKS = 16
-- The longest a parked waiter sleeps before looking at the link again: the
-- bootstrap socket (liveness) is checked by the core on each look.
local NAP_MAX = 0.1

local Link = {}
Link.__index = Link
M.Link = Link

---------------------------------------------------------------------------
-- Options: declared as data and checked; unknown keys are misuse.

local OPTS = {
  device = "string", personality = "string", ports = "string", pci = "string",
  gid_index = "number", port = "number", nbuf = "number", stride = "number",
  framing = "string", qp_type = "string", timeout = "number", liveness = "number",
  spin = "number", trace = "boolean", fallback = "boolean", exchange = "function",
  connect_timeout = "number", stall = "number", wire = "string", faults = "table",
  pcap = "string", eager = "boolean",
}
local WIRES = { auto = true, shm = true, udp = true }
-- tbrt's own framing ("tbrt" = "auto": fixed on Apple devices, variable on
-- Linux), or llama.cpp's RDMA transports byte for byte (core/include/tbrt.h)
local FRAMING = { auto = 0, tbrt = 0, fixed = 1, variable = 2, ["llama-apple"] = 3,
  ["llama-linux"] = 4 }
M.FRAMING = FRAMING
local QP_TYPE = { RC = 2, UC = 3 }   -- enum ibv_qp_type

local function valid_keys()
  local k = {}
  for name in pairs(OPTS) do k[#k + 1] = name end
  table.sort(k)
  return table.concat(k, ", ")
end

function M.check_opts(opts, level)
  level = (level or 1) + 1
  if opts == nil then return {} end
  if type(opts) ~= "table" then error("link options must be a table", level) end
  for k, v in pairs(opts) do
    local want = OPTS[k]
    if not want then
      error(string.format("unknown link option %q (valid: %s)", tostring(k), valid_keys()), level)
    end
    if type(v) ~= want and not (k == "faults" and type(v) == "string") then
      error(string.format("link option %s must be a %s, got %s", k, want, type(v)), level)
    end
  end
  if opts.framing and not FRAMING[opts.framing] then
    error("link option framing must be tbrt (auto), fixed, variable, llama-apple or " ..
      "llama-linux, got " .. opts.framing, level)
  end
  if opts.wire and not WIRES[opts.wire] then
    error("link option wire must be auto, shm or udp, got " .. opts.wire, level)
  end
  if opts.faults then require("tbrt.verbs").faults_spec(opts.faults, "link option faults") end
  if opts.qp_type and not QP_TYPE[opts.qp_type] then
    error("link option qp_type must be RC or UC, got " .. opts.qp_type, level)
  end
  return opts
end

local function c_opts(opts)
  local o = ffi.new("tbrt_link_opts")
  C.tbrt_link_opts_init(o)
  if opts.device then o.device = opts.device end
  if opts.personality then o.personality = opts.personality end
  if opts.ports then o.ports = opts.ports end
  if opts.pci then o.pci = opts.pci end
  if opts.gid_index then o.gid_index = opts.gid_index end
  if opts.port then o.port = opts.port end
  if opts.nbuf then o.nbuf = opts.nbuf end
  if opts.stride then o.stride = opts.stride end
  if opts.framing then o.framing = FRAMING[opts.framing] end
  if opts.qp_type then o.qp_type = QP_TYPE[opts.qp_type] end
  if opts.timeout then o.timeout = opts.timeout end
  if opts.liveness then o.liveness = opts.liveness end
  if opts.spin then o.spin = opts.spin end
  if opts.stall then o.stall = opts.stall end
  if opts.trace then o.trace = 1 end
  if opts.wire then o.wire = opts.wire end
  if opts.pcap then o.pcap = opts.pcap end
  if opts.eager == false then o.no_eager = 1 end
  if opts.faults then o.faults = require("tbrt.verbs").faults_spec(opts.faults) end
  return o
end

---------------------------------------------------------------------------
-- Probe and activation.

local function errtext(rc, msg) return ffi.string(C.tbrt_errname(rc)) .. ": " .. msg end

-- Watchers told of every link probed (the REPL keeps a list to close them
-- at exit): link.watch(fn) calls fn(link) for each new one.
local watchers = {}
function M.watch(fn)
  if type(fn) ~= "function" then error("link.watch: expected a function", 2) end
  watchers[#watchers + 1] = fn
end

-- Probe on a bootstrap socket (tbrt.sock). The link takes the socket over.
-- Returns the link (state "probed"; l:caps() is this side's caps).
function M.probe(sock, opts)
  opts = M.check_opts(opts, 2)
  if type(sock) ~= "table" or not sock.fileno then error("probe: expected a bootstrap socket", 2) end
  local fd = sock:fileno()
  if not fd then return nil, "EBADF: probe: the socket is closed" end
  local o = c_opts(opts)
  local out = ffi.new("tbrt_link *[1]")
  local caps = ffi.new("uint8_t[24]")
  local err = ffi.new("char[512]")
  local rc = C.tbrt_link_probe(fd, o, out, caps, err, 512)
  if rc ~= 0 then return nil, errtext(rc, ffi.string(err)) end
  sock:release()   -- the fd is the core's now
  local self = setmetatable({
    _l = ffi.gc(out[0], C.tbrt_link_free),
    _caps = ffi.string(caps, 24),
    opts = opts,
    timeout = opts.timeout or 30,
    fds = ffi.new("int[2]"),
  }, Link)
  self.id = self:info().id
  for _, fn in ipairs(watchers) do fn(self) end
  return self
end

function Link:caps() return self._caps end

function Link:_err(rc)
  return errtext(rc, ffi.string(C.tbrt_link_why(self._l)))
end

function Link:_check()
  if not self._l then error("link is closed", 3) end
end

-- The fds: [0] completion fd (RDMA) or the socket (tcp); [1] the socket.
function Link:_fds()
  local n = C.tbrt_link_fds(self._l, self.fds, 2)
  return n, self.fds[0], self.fds[1]
end

function Link:is_tcp() return self:info().kind == "tcp" end

-- Activate with the peer's caps and wait for the peer's readiness byte.
function Link:activate(peer_caps, timeout)
  self:_check()
  if type(peer_caps) ~= "string" then error("activate: peer caps must be a string", 2) end
  local rc = C.tbrt_link_activate(self._l, peer_caps, #peer_caps)
  if rc ~= 0 then return nil, self:_err(rc) end
  timeout = timeout or self.timeout
  local deadline = now() + timeout
  local n = self:_fds()
  local sockfd = n == 2 and self.fds[1] or self.fds[0]
  while true do
    if not self._l then return nil, self:_closed_while("readiness") end
    rc = C.tbrt_link_ready(self._l)
    if rc == 0 then break end
    if rc ~= EAGAIN then return nil, self:_err(rc) end
    local left = deadline - now()
    if left <= 0 then
      return nil, string.format("ETIMEDOUT: link %d: readiness: no byte from the peer within %g s: " ..
        "is the other end activating its side (activate after the caps exchange)?", self.id, timeout)
    end
    task.poll(sockfd, "r", left)
  end
  self.ready = true
  self.tcp = self:info().kind == "tcp"
  return true
end

---------------------------------------------------------------------------
-- Waiting: spin while the core makes progress, then park on the fd. The
-- data calls below try first and wait only on EAGAIN; no closures on these
-- paths, so LuaJIT compiles them.

local WAIT_RECV, WAIT_SEND, WAIT_IDLE = C.TBRT_WAIT_RECV, C.TBRT_WAIT_SEND, C.TBRT_WAIT_IDLE
local others_ready = task.others_ready

-- Wait until a call for `what` would not block (or an error is there to
-- report), or until deadline ("timeout"). Returns true when the caller
-- should try again; nil, "closed" when another task closed the link while
-- this one was parked (the caller must not touch the core's link then).
-- How long it keeps looking after the last progress, and how it pauses
-- between looks, is the core's (tbrt_link_idle: opts.spin, longer while the
-- peer process is awake, the CPU yielded to a peer that shares it), as for
-- C callers. While it looks, other tasks that are ready run first (one
-- thread serves every link: spinning on one would starve the rest); the
-- time of its last progress survives those turns (the caller's deadline
-- names its operation), so waiters that keep letting each other run still
-- park once their window is over.
function Link:_wait(what, deadline, events, timeout)
  local l = self._l
  -- the same operation (its deadline) coming back after letting others run
  -- goes on from its last progress; a new one starts afresh
  local since = deadline and self._idle_for == deadline and self._idle_since or nil
  local turns, moved = 0, false
  while true do
    local n = C.tbrt_link_progress(l)
    if n < 0 or C.tbrt_link_ready_for(l, what) ~= 0 then return true, nil, deadline end
    -- the clock, the window and the other tasks every 16th idle turn, as
    -- the C waiter does: a short turn sees the peer's message sooner, and
    -- a wait that ends within 16 turns (a ping-pong's) reads no clock (a
    -- read costs what a look does in a VM); without a deadline yet (the
    -- caller's timeout: from its first read) the window starts there too
    turns = turns + 1
    if n > 0 then moved = true end
    if turns % 16 == 0 then
      local t = now()
      if not deadline and timeout then deadline = t + timeout end
      if moved or not since then since, moved = t, false end
      if deadline and t >= deadline then return nil, "timeout" end
      local look = t - since < C.tbrt_link_idle(l)
      if look and others_ready() then
        self._idle_for, self._idle_since = deadline, since
        task.sleep(0)
        if not self._l then return nil, "closed" end
        return true, nil, deadline
      end
      if not look then
        self._idle_for = nil              -- woken, it looks afresh
        local a = C.tbrt_link_arm(l)
        if a ~= 0 then
          if a > 0 then task.sleep(0) end       -- let others run, then look again
          if not self._l then return nil, "closed" end
          return true, nil, deadline
        end
        local nap = NAP_MAX
        local cap = C.tbrt_link_sleep_max(l)
        if cap >= 0 and cap < nap then nap = cap end
        if deadline and deadline - t < nap then nap = deadline - t end
        local nfd, fd0 = self:_fds()
        if nfd > 0 then task.poll(fd0, events, nap) else task.sleep(nap) end
        if not self._l then return nil, "closed" end
        return true, nil, deadline
      end
    end
  end
end

function Link:_closed_while(op)
  return string.format("ECANCELED: link %d: %s: the link was closed (by another task) while " ..
    "this one waited", self.id, op)
end

local function as_pointer(data, len, what)
  if type(data) == "string" then
    return ffi.cast("const uint8_t *", data), len or #data
  elseif type(data) == "cdata" then
    if not len then error(what .. ": a cdata buffer needs a length", 3) end
    return ffi.cast("const uint8_t *", data), len
  end
  error(what .. ": data must be a string or a cdata buffer, got " .. type(data), 3)
end

-- Send all of data (coalesced into strides; flush at message boundaries).
-- Returns the byte count, or nil, err, bytes-accepted-before-the-error.
function Link:send(data, len, timeout)
  local l = self._l
  if not l then error("link is closed", 2) end
  if self._sv then self:_views_busy("send", "send") end
  local p, n = as_pointer(data, len, "send")
  if n == 0 then return 0 end
  -- all of it at once: no loop on this path, so a caller's loop compiles whole
  local first = tonumber(C.tbrt_link_send(l, p, n))
  if first == n then return n end
  local done, deadline = first > 0 and first or 0, nil
  while done < n do
    local r = tonumber(C.tbrt_link_send(l, p + done, n - done))
    if r > 0 then
      done = done + r
    elseif r == EAGAIN then
      local ok, why
      ok, why, deadline = self:_wait(WAIT_SEND, deadline, self.tcp and "w" or "r",
        timeout or self.timeout)
      if not ok then
        if why == "closed" then return nil, self:_closed_while("send"), done end
        return nil, self:_err(C.tbrt_link_timed_out(l, WAIT_SEND, done, n, timeout or self.timeout)), done
      end
    else
      return nil, self:_err(r), done
    end
  end
  return n
end

-- Post the partly filled stride (tcp: write the coalesced bytes).
function Link:flush(timeout)
  local l = self._l
  if not l then error("link is closed", 2) end
  if self._sv then self:_views_busy("flush", "send") end
  local rc = C.tbrt_link_flush(l)       -- at once, outside the loop (as in send)
  if rc == 0 then return true end
  local deadline
  while true do
    rc = C.tbrt_link_flush(l)
    if rc == 0 then return true end
    if rc ~= EAGAIN then return nil, self:_err(rc) end
    local ok, why
    ok, why, deadline = self:_wait(WAIT_SEND, deadline, "w", timeout or self.timeout)
    if not ok then
      if why == "closed" then return nil, self:_closed_while("flush") end
      return nil, string.format("ETIMEDOUT: link %d: flush: not done within %g s", self.id,
        timeout or self.timeout)
    end
  end
end

-- Receive into a cdata buffer: exactly n bytes, or with some = true as soon
-- as any arrived. Returns the count, or nil, err, count-so-far.
function Link:recv_into(buf, n, timeout, some)
  local l = self._l
  if not l then error("link is closed", 2) end
  if self._rv then self:_views_busy("recv", "recv") end
  local p = ffi.cast("uint8_t *", buf)
  if n == 0 then return 0 end
  -- all of it at once: no loop on this path, so a caller's loop compiles whole.
  -- The first RECV_LOOKS looks are C's own: a message that comes within them
  -- (a ping-pong's reply) is found without going through _wait, whose exits
  -- from compiled code to the caller's cost more than a look (8 B one-way
  -- latency, pair.lua: ~10% less in 8 of 8 interleaved runs)
  local first = tonumber(C.tbrt_link_recv_looking(l, p, n, RECV_LOOKS))
  if first == n or (some and first > 0) then return first end
  local got, deadline = first > 0 and first or 0, nil
  while got < n do
    local r = tonumber(C.tbrt_link_recv(l, p + got, n - got))
    if r > 0 then
      got = got + r
      if some then return got end
    elseif r == EAGAIN then
      local ok, why
      ok, why, deadline = self:_wait(WAIT_RECV, deadline, "r", timeout or self.timeout)
      if not ok then
        if why == "closed" then return nil, self:_closed_while("recv"), got end
        return nil, self:_err(C.tbrt_link_timed_out(l, WAIT_RECV, got, n, timeout or self.timeout)), got
      end
    elseif r == 0 then
      if some and got > 0 then return got end
      return nil, string.format("EOF: link %d: the peer closed the link after %d of %d bytes",
        self.id, got, n), got
    else
      return nil, self:_err(r), got
    end
  end
  return got
end

-- Receive exactly n bytes as a string: data, or nil, err, partial.
function Link:recv(n, timeout)
  if type(n) ~= "number" or n < 0 or n % 1 ~= 0 then
    error("recv: n must be a byte count, got " .. tostring(n), 2)
  end
  self._rbuf = (self._rbufn or 0) >= n and self._rbuf or ffi.new("uint8_t[?]", math.max(n, 1))
  self._rbufn = math.max(self._rbufn or 0, n)
  local got, err, part = self:recv_into(self._rbuf, n, timeout)
  if not got then return nil, err, ffi.string(self._rbuf, part or 0) end
  return ffi.string(self._rbuf, got)
end

-- Whatever has arrived, at least one byte, at most max.
function Link:recv_some(max, timeout)
  self._rbuf = (self._rbufn or 0) >= max and self._rbuf or ffi.new("uint8_t[?]", math.max(max, 1))
  self._rbufn = math.max(self._rbufn or 0, max)
  local got, err = self:recv_into(self._rbuf, max, timeout, true)
  if not got then return nil, err end
  return ffi.string(self._rbuf, got)
end

---------------------------------------------------------------------------
-- Information, timeouts, close.

-- Register a cdata buffer with the link (tbrt_link_mem_reg): a send of
-- 32 KiB or more from it is offered to the peer, which reads it with RDMA
-- READs (straight into its own registered buffer: one copy in all), and a
-- receive into it takes an offer that way. The link holds on to buf until
-- unregister or close, so it cannot be collected while the device may
-- touch it. On tcp this does nothing. true, or nil, err.
function Link:register(buf, len)
  local l = self._l
  if not l then error("link is closed", 2) end
  if type(buf) ~= "cdata" then error("register: buf must be a cdata buffer, got " .. type(buf), 2) end
  if type(len) ~= "number" or len < 1 or len % 1 ~= 0 then
    error("register: len must be a byte count >= 1, got " .. tostring(len), 2)
  end
  local rc = C.tbrt_link_mem_reg(l, buf, len)
  if rc ~= 0 then return nil, self:_err(rc) end
  self._regs = self._regs or {}
  self._regs[tonumber(ffi.cast("uintptr_t", buf))] = buf
  return true
end

-- Undo register (buf as it was registered). true, or nil, err (EBUSY while
-- a send from it is still lent to the peer).
function Link:unregister(buf)
  local l = self._l
  if not l then error("link is closed", 2) end
  if type(buf) ~= "cdata" then error("unregister: buf must be a cdata buffer, got " .. type(buf), 2) end
  local rc = C.tbrt_link_mem_dereg(l, buf)
  if rc ~= 0 then return nil, self:_err(rc) end
  if self._regs then self._regs[tonumber(ffi.cast("uintptr_t", buf))] = nil end
  return true
end

function Link:settimeouts(timeout, liveness, spin)
  self:_check()
  if timeout then self.timeout = timeout end
  C.tbrt_link_set_timeouts(self._l, timeout or -1, liveness or -1, spin or -1)
end

function Link:stats()
  self:_check()
  local s = ffi.new("tbrt_link_stats")
  C.tbrt_link_stats_get(self._l, s)
  return {
    bytes_sent = tonumber(s.bytes_sent), bytes_recv = tonumber(s.bytes_recv),
    frames_sent = tonumber(s.frames_sent), frames_recv = tonumber(s.frames_recv),
    completions = tonumber(s.completions), spins = tonumber(s.spins),
    sleeps = tonumber(s.sleeps), eagain = tonumber(s.eagain),
    inline_sends = tonumber(s.inline_sends), recv_posted = tonumber(s.recv_posted),
    cpu_moves = tonumber(s.cpu_moves), direct_sends = tonumber(s.direct_sends),
    direct_recvs = tonumber(s.direct_recvs), direct_bytes = tonumber(s.direct_bytes),
    fellow_yields = tonumber(s.fellow_yields),
    eager_sends = tonumber(s.eager_sends), eager_recvs = tonumber(s.eager_recvs),
    eager_wakes = tonumber(s.eager_wakes),
  }
end

-- The device's counters for this link's queue pair (soft devices: packets
-- sent/received, retransmits, NAKs, RNR NAKs, duplicates, drops injected,
-- ICRC failures...), merged into stats() as wire_<name>.
local function wire_counters(self, t)
  local dev, qp = C.tbrt_link_dev(self._l), C.tbrt_link_qp(self._l)
  if dev == nil then return t end
  local names, vals = ffi.new("const char *[64]"), ffi.new("uint64_t[64]")
  local n = C.tbrt_dev_counters(dev, qp ~= nil and qp.qp_num or 0, names, vals, 64)
  for i = 0, n - 1 do t["wire_" .. ffi.string(names[i])] = tonumber(vals[i]) end
  return t
end

local plain_stats = Link.stats
function Link:stats()
  return wire_counters(self, plain_stats(self))
end

-- Faults on this link's device (each link has a device of its own), set
-- while traffic runs: link:faults{ drop = 0.01, delay = "200us", seed = 7 };
-- link:faults{} clears them. Each end sets its own (dir = "tx" by default:
-- what this end sends).
function Link:faults(f)
  self:_check()
  local dev = C.tbrt_link_dev(self._l)
  if dev == nil then return nil, "ENOTSUP: link " .. self.id .. ": faults: a tcp link has no device" end
  local rc = C.tbrt_dev_faults(dev, require("tbrt.verbs").faults_spec(f, "link:faults"))
  if rc ~= 0 then return nil, errtext(rc, ffi.string(C.tbrt_dev_why(dev))) end
  return true
end

local STATES = { "probed", "activating", "ready", "broken", "closed" }
local FRAMINGS = { [0] = "auto", "fixed", "variable", "llama-apple", "llama-linux" }
local QPT = { [2] = "RC", [3] = "UC", [4] = "UD" }

function Link:info()
  if not self._l then return { id = self.id, state = "closed" } end
  local i = ffi.new("tbrt_link_info")
  C.tbrt_link_info_get(self._l, i)
  return {
    id = i.id, state = STATES[i.state] or tostring(i.state), device = ffi.string(i.device),
    kind = ffi.string(i.kind), personality = ffi.string(i.personality),
    framing = FRAMINGS[i.framing], qp_type = QPT[i.qp_type], port = i.port,
    gid_index = i.gid_index, qpn = i.qpn, peer_qpn = i.peer_qpn, nbuf = i.nbuf,
    stride = i.stride, why_device = ffi.string(i.why_device), fallback = ffi.string(i.fallback),
  }
end

function Link:why() return self._l and ffi.string(C.tbrt_link_why(self._l)) or "closed" end
function Link:teardown() return self._l and ffi.string(C.tbrt_link_teardown(self._l)) or self._td end

-- The device objects underneath (cdata), for scripts that look below.
function Link:verbs()
  self:_check()
  return C.tbrt_link_dev(self._l), C.tbrt_link_qp(self._l), C.tbrt_link_cq(self._l)
end

-- Test hook: corrupt the next frame ("magic", "length", "skip", "repeat"),
-- or the next direct offer ("offer-key", "offer-length", "offer-wrap",
-- "offer-twice"), or send a done frame that answers no offer ("stray-done"),
-- or the next eager frame ("eager-length": more than a slot holds,
-- "eager-credit": a consumed count beyond what the peer wrote).
local inject_codes = { magic = 1, length = 2, skip = 3, ["repeat"] = 4, ["offer-key"] = 6,
  ["offer-length"] = 7, ["offer-wrap"] = 8, ["offer-twice"] = 9, ["stray-done"] = 10,
  ["eager-length"] = 11, ["eager-credit"] = 12 }
function Link:inject(what)
  local codes = inject_codes
  if not codes[what] then
    error("inject: magic, length, skip, repeat, offer-key, offer-length, offer-wrap, " ..
      "offer-twice, stray-done, eager-length or eager-credit", 2)
  end
  return C.tbrt_link_inject(self._l, codes[what]) == 0
end

-- Orderly close: flush, wait (bounded) for the sends in flight, goodbye,
-- teardown. Safe to call twice.
function Link:close(timeout)
  if not self._l then return true end
  local l = self._l
  if self.ready and task.current() then
    C.tbrt_link_flush(l)
    local deadline = now() + math.min(timeout or 2, self.timeout)
    while C.tbrt_link_inflight(l) ~= 0 and C.tbrt_link_progress(l) >= 0 do
      if not self:_wait(WAIT_IDLE, deadline, "w") then break end
    end
    if not self._l then return true end     -- another task closed it meanwhile
  end
  local n, fd0, fd1 = self:_fds()
  if n >= 1 then task.poll_close(fd0) end
  if n >= 2 then task.poll_close(fd1) end
  local rc = C.tbrt_link_close(l)
  local err = rc ~= 0 and self:_err(rc) or nil
  self._td = ffi.string(C.tbrt_link_teardown(l))
  self._info = self:info()
  ffi.gc(l, nil)
  C.tbrt_link_free(l)
  -- the device is gone: registered buffers may be collected now
  self._l, self._sv, self._rv, self._regs = nil, nil, nil, nil
  if err then return nil, err end
  return true
end

-- zero-copy views: send_view/commit, recv_view/release (tbrt/view.lua)
require("tbrt.view")(Link, { now = now, EAGAIN = EAGAIN, WAIT_SEND = WAIT_SEND,
  WAIT_RECV = WAIT_RECV })

local function size(n)
  local units = { "B", "KiB", "MiB", "GiB", "TiB" }
  local u = 1
  while n >= 1024 and u < #units do n = n / 1024; u = u + 1 end
  return u == 1 and string.format("%dB", n) or string.format("%.1f%s", n, units[u])
end
M.size = size

function Link:__tostring()
  if not self._l then return string.format("<link %d closed>", self.id or 0) end
  local i, s = self:info(), self:stats()
  local qstate = ({ probed = "RESET", activating = "RTR", ready = "RTS", broken = "ERR" })[i.state]
  return string.format("<link %d %s%s %s sent=%s recv=%s>", i.id, i.device,
    i.personality ~= "" and (" " .. i.personality) or "",
    i.kind == "tcp" and i.state:upper() or (qstate or i.state), size(s.bytes_sent), size(s.bytes_recv))
end

return M
