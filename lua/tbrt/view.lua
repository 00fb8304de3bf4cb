-- tbrt/view.lua - zero-copy views of a link's rings, as Link methods
-- (installed by tbrt.link; the contract is in core/include/tbrt.h).
--
--   local p, n = l:send_view(want [, timeout])   -- uint8_t* into the pending stride, n <= want
--   ffi.copy(p, src, n) ; l:commit(n)            -- send those n bytes (fewer: the rest is given back)
--   local p, n = l:recv_view([timeout])          -- const uint8_t* of the oldest stride's unread bytes
--   use(p, n) ; l:release([k])                   -- give back k (default all n) bytes
--
-- A view never crosses strides: send_view gives at most the room left in
-- the stride being filled (at most the stride payload; 256 KiB on tcp and
-- llama-linux), recv_view at most what is left of one stride. For
-- more, commit/release and ask again. want = nil (or 0) asks for all the
-- room there is. The calls wait as tasks like send/recv (bounded by the
-- timeout); errors are nil, "ECODE: link N: ..."; recv_view at EOF is nil,
-- "EOF: ...". Misuse raises: a second send view, commit or release without
-- a view or of more than it holds, send/flush with a send view open, recv
-- with a recv view open. The next recv_view releases an open recv view
-- (all of it). A view is valid until commit/release/the next view call; a
-- view left open at close points at fresh zero pages, not freed memory.
local ffi = require("ffi")
local core = require("tbrt.ffi")

local C = core.C

return function(Link, env)
  local now, EAGAIN, WAIT_SEND, WAIT_RECV = env.now, env.EAGAIN, env.WAIT_SEND, env.WAIT_RECV

  local function count(v, what, level)
    if v == nil then return 0 end
    if type(v) ~= "number" or v < 0 or v % 1 ~= 0 then
      error(what .. ": expected a byte count, got " .. tostring(v), level + 1)
    end
    return v
  end

  local function handle(self, op)
    local l = self._l
    if not l then error(op .. ": link is closed", 3) end
    return l
  end

  local function slots(self)
    local s = self._vslots
    if not s then
      s = { send = ffi.new("uint8_t *[1]"), recv = ffi.new("const uint8_t *[1]") }
      self._vslots = s
    end
    return s
  end

  -- what a wait that ran out says to check (as the C calls' messages)
  local function timed_out(self, op, timeout)
    if op == "send_view" then
      return string.format("ETIMEDOUT: link %d: send_view: no room within %g s (the call's " ..
        "timeout): every stride is in flight and the peer, alive, is not taking them (not " ..
        "reading?)", self.id, timeout)
    end
    return string.format("ETIMEDOUT: link %d: recv_view: nothing arrived within %g s (the " ..
      "call's timeout); the peer is alive but sent nothing more: check that it sends, and " ..
      "flushes after its last send", self.id, timeout)
  end

  -- The waits are apart from the calls: the fast path (a view at once) has
  -- no loop in it, so a caller's loop compiles into one trace with it.
  local function send_view_wait(self, l, want, out, timeout)
    local deadline = now() + (timeout or self.timeout)
    while true do
      local ok, why = self:_wait(WAIT_SEND, deadline, self.tcp and "w" or "r")
      if not ok then
        if why == "closed" then return nil, self:_closed_while("send_view") end
        return nil, timed_out(self, "send_view", timeout or self.timeout)
      end
      if not self._l then return nil, self:_closed_while("send_view") end
      local r = tonumber(C.tbrt_link_send_view(l, want, out))
      if r > 0 then
        self._sv = r
        return out[0], r
      end
      if r ~= EAGAIN then return nil, self:_err(r) end
    end
  end

  function Link:send_view(want, timeout)
    local l = handle(self, "send_view")
    want = count(want, "send_view", 2)
    if self._sv then
      error(string.format("send_view: link %d: a send view of %d bytes is open (commit it first)",
        self.id, self._sv), 2)
    end
    local out = slots(self).send
    local r = tonumber(C.tbrt_link_send_view(l, want, out))
    if r > 0 then
      self._sv = r
      return out[0], r
    end
    if r ~= EAGAIN then return nil, self:_err(r) end
    return send_view_wait(self, l, want, out, timeout)
  end

  function Link:commit(n)
    local l = handle(self, "commit")
    n = count(n, "commit", 2)
    local open = self._sv
    if not open then error(string.format("commit: link %d: no send view is open", self.id), 2) end
    if n > open then
      error(string.format("commit: link %d: %d bytes, but the send view holds %d", self.id, n,
        open), 2)
    end
    self._sv = nil
    local rc = C.tbrt_link_commit(l, n)
    if rc ~= 0 then return nil, self:_err(rc) end
    return true
  end

  local function recv_view_got(self, r, out)
    if r > 0 then
      self._rv = r
      return out[0], r
    end
    if r == 0 then return nil, string.format("EOF: link %d: the peer closed the link", self.id) end
    return nil, self:_err(r)
  end

  local function recv_view_wait(self, l, out, timeout)
    local deadline = now() + (timeout or self.timeout)
    while true do
      local ok, why = self:_wait(WAIT_RECV, deadline, "r")
      if not ok then
        if why == "closed" then return nil, self:_closed_while("recv_view") end
        return nil, timed_out(self, "recv_view", timeout or self.timeout)
      end
      if not self._l then return nil, self:_closed_while("recv_view") end
      local r = tonumber(C.tbrt_link_recv_view(l, out))
      if r ~= EAGAIN then return recv_view_got(self, r, out) end
    end
  end

  function Link:recv_view(timeout)
    local l = handle(self, "recv_view")
    self._rv = nil                      -- the core releases an open one first
    local out = slots(self).recv
    local r = tonumber(C.tbrt_link_recv_view(l, out))
    if r ~= EAGAIN then return recv_view_got(self, r, out) end
    return recv_view_wait(self, l, out, timeout)
  end

  function Link:release(n)
    local l = handle(self, "release")
    local open = self._rv
    if not open then error(string.format("release: link %d: no recv view is open", self.id), 2) end
    n = n == nil and open or count(n, "release", 2)
    if n > open then
      error(string.format("release: link %d: %d bytes, but the recv view holds %d", self.id, n,
        open), 2)
    end
    self._rv = nil
    local rc = C.tbrt_link_release(l, n)
    if rc ~= 0 then return nil, self:_err(rc) end
    return true
  end

  -- For send/flush/recv: raise when a view of that direction is open.
  function Link:_views_busy(op, dir)
    local open = dir == "send" and self._sv or self._rv
    if open then
      error(string.format("%s: link %d: a %s view of %d bytes is open (%s it first)", op, self.id,
        dir, open, dir == "send" and "commit" or "release"), 3)
    end
  end
end
