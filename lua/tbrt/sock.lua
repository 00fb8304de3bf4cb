-- tbrt/sock.lua - the bootstrap TCP socket, as Lua sees it before a link
-- takes it over: connect / listen+accept with luv, then the plain fd.
--
-- luv connects and accepts (names, IPv6, the loop), then the fd is dup'ed
-- and the luv handle closed at once, before it could read ahead: the bytes
-- of the caps exchange and the readiness byte must reach exactly the reader
-- that asks for them (Lua first, then the core). Reads and writes are
-- non-blocking calls that park the task on task.poll when they would block.
local ffi = require("ffi")
local uv = require("luv")
local task = require("tbrt.task")
local libc = require("tbrt.libc")

local C = libc.C
local M = {}

local Sock = {}
Sock.__index = Sock
M.Sock = Sock

local EAGAIN, EINTR = 11, 4

local function errstr(e)
  local names = { [104] = "ECONNRESET", [32] = "EPIPE", [110] = "ETIMEDOUT", [111] = "ECONNREFUSED",
    [9] = "EBADF" }
  return (names[e] or ("E" .. e)) .. ": " .. ffi.string(C.strerror(e))
end

-- "host:port" of a luv address ({ ip, port, family }), IPv6 in brackets.
local function addr_text(a)
  if not a or not a.ip then return "?" end
  return (a.ip:find(":", 1, true) and ("[" .. a.ip .. "]") or a.ip) .. ":" .. tostring(a.port)
end
M.addr_text = addr_text

-- sock.peer: the other end's address as text ("10.0.0.2:51234").
local function from_handle(h, what)
  local fd = h:fileno()
  local peer = h:getpeername()
  local nfd = fd and libc.dup(fd) or -1
  h:close()
  if nfd < 0 then return nil, "EBADF: " .. what .. ": cannot take the socket over" end
  local text = addr_text(peer)
  if what:find("^accept ") then what = what .. " from " .. text end
  return setmetatable({ fd = nfd, what = what, peer = text }, Sock)
end

-- Connect, bounded by timeout seconds (nil: unbounded).
function M.connect(host, port, timeout)
  if type(host) ~= "string" then error("connect: host must be a string", 2) end
  if type(port) ~= "number" then error("connect: port must be a number", 2) end
  local what = "connect " .. host .. ":" .. port
  local ai, gerr = uv.getaddrinfo(host, tostring(port), { socktype = "stream" })
  if not ai or not ai[1] then return nil, (gerr or "ENOENT") .. ": cannot resolve " .. host end
  local tcp = uv.new_tcp()
  local cerr
  local ok, err = task.park("connect", timeout, function(w)
    tcp:connect(ai[1].addr, ai[1].port, function(e)
      cerr = e
      task.wake(w, true)
    end)
  end, function()
    return string.format("ETIMEDOUT: %s: no answer within %g s", what, timeout)
  end)
  if not ok or cerr then
    if not tcp:is_closing() then tcp:close() end
    return nil, err or (cerr .. ": " .. what)
  end
  return from_handle(tcp, what)
end

local Server = {}
Server.__index = Server
M.Server = Server

-- Listen on host:port (port 0: any free port; server.port tells which).
function M.listen(host, port, backlog)
  local tcp = uv.new_tcp()
  local ok, err = tcp:bind(host, port)
  if not ok then tcp:close(); return nil, err .. ": bind " .. host .. ":" .. port end
  local s = setmetatable({ tcp = tcp, pending = {}, waiters = {}, host = host }, Server)
  ok, err = tcp:listen(backlog or 16, function(lerr)
    if lerr then s.error = lerr end
    local client = uv.new_tcp()
    if tcp:accept(client) then
      s.pending[#s.pending + 1] = client
    else
      client:close()
    end
    local w = table.remove(s.waiters, 1)
    if w then task.wake(w, true) end
  end)
  if not ok then tcp:close(); return nil, err .. ": listen " .. host .. ":" .. port end
  local name = tcp:getsockname()
  s.port = name and name.port or port
  return s
end

function Server:accept(timeout)
  if not self.tcp then return nil, "EBADF: accept: server closed" end
  if #self.pending == 0 then
    local ok, err = task.park("accept", timeout, function(w)
      self.waiters[#self.waiters + 1] = w
      return function()
        for i, x in ipairs(self.waiters) do if x == w then table.remove(self.waiters, i) break end end
      end
    end, function()
      return string.format("ETIMEDOUT: accept on %s:%d: nobody connected within %g s", self.host,
        self.port, timeout)
    end)
    if not ok then return nil, err end
  end
  local client = table.remove(self.pending, 1)
  if not client then return nil, "ECANCELED: accept: server closed" end
  return from_handle(client, "accept on " .. self.host .. ":" .. self.port)
end

function Server:close()
  if self.tcp then
    self.tcp:close()
    self.tcp = nil
    for _, c in ipairs(self.pending) do c:close() end
    self.pending = {}
    for _, w in ipairs(self.waiters) do
      task.wake(w, nil, string.format("ECANCELED: accept on %s:%d: the server was closed", self.host,
        self.port))
    end
    self.waiters = {}
  end
end

-- Write all of data (a string), parking while the socket is full.
function Sock:send(data, timeout)
  local len, off = #data, 0
  local buf = ffi.cast("const char *", data)
  local deadline = timeout and (uv.now() / 1000 + timeout)
  while off < len do
    if not self.fd then return nil, "EBADF: send: socket closed" end
    local n = tonumber(C.write(self.fd, buf + off, len - off))
    if n > 0 then
      off = off + n
    else
      local e = ffi.errno()
      if n == 0 or (e ~= EAGAIN and e ~= EINTR) then return nil, errstr(e) .. " (send)" end
      local left = deadline and math.max(0, deadline - uv.now() / 1000)
      local ok, err = task.poll(self.fd, "w", left)
      if not ok then return nil, err end
    end
  end
  return len
end

-- Read exactly n bytes. Returns data, or nil, err, partial.
function Sock:recv(n, timeout)
  local buf = ffi.new("char[?]", math.max(n, 1))
  local off = 0
  local deadline = timeout and (uv.now() / 1000 + timeout)
  while off < n do
    if not self.fd then return nil, "EBADF: recv: socket closed", ffi.string(buf, off) end
    local r = tonumber(C.read(self.fd, buf + off, n - off))
    if r > 0 then
      off = off + r
    elseif r == 0 then
      return nil, string.format("EOF: %s: the peer closed the socket after %d of %d bytes",
        self.what, off, n), ffi.string(buf, off)
    else
      local e = ffi.errno()
      if e ~= EAGAIN and e ~= EINTR then return nil, errstr(e), ffi.string(buf, off) end
      uv.update_time()
      local left = deadline and math.max(0, deadline - uv.now() / 1000)
      local ok, err = task.poll(self.fd, "r", left)
      if not ok then
        if err and err:match("^ETIMEDOUT") then
          err = string.format("ETIMEDOUT: %s: %d of %d bytes within %g s", self.what, off, n, timeout)
        end
        return nil, err, ffi.string(buf, off)
      end
    end
  end
  return ffi.string(buf, n)
end

function Sock:fileno() return self.fd end

-- Hand the fd over (to a link, which will close it): Lua stops using it.
function Sock:release()
  local fd = self.fd
  if fd then task.poll_close(fd) end
  self.fd = nil
  return fd
end

function Sock:close()
  local fd = self:release()
  if fd then C.close(fd) end
end

return M
