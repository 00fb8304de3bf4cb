-- tbrt/matrix/msg.lua - the messages between the matrix driver (the
-- coordinator) and its agents: length-prefixed JSON objects over one TCP
-- connection (tbrt.sock).
--
--   frame = u32 length (big endian) + that many bytes of JSON, an object
--           with a string field "t" (the message type)
--
-- Everything read is hostile input: the length is checked against the
-- connection's bound before anything is allocated, each read has a
-- deadline, the JSON nesting is bounded (matrix.json) and a frame that is
-- not an object with a type is refused. A connection that sent one bad
-- frame is closed by its reader (the stream cannot be trusted after it).
--
--   local c = msg.wrap(sock, { max = 1 MiB, what = "agent 3" })
--   c:send({ t = "ping", id = 1 }, timeout)  -> true | nil, err
--   c:recv(timeout)                          -> message | nil, err
-- Sends from several tasks are serialized (a frame is written whole
-- before the next one starts).
local task = require("tbrt.task")
local json = require("tbrt.matrix.json")

local M = {}

M.MAX_FRAME = 1024 * 1024          -- the matrix file travels in one frame
M.HEADER = 4

local Conn = {}
Conn.__index = Conn
M.Conn = Conn

function M.wrap(sock, opts)
  opts = opts or {}
  return setmetatable({ sock = sock, max = opts.max or M.MAX_FRAME, what = opts.what or "peer",
    sending = false }, Conn)
end

local function be32(n)
  return string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
    math.floor(n / 256) % 256, n % 256)
end

local function read_be32(s)
  local a, b, c, d = s:byte(1, 4)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

-- A frame for a message (for tests and for send).
function M.frame(m, max)
  local body = json.encode(m, "message " .. tostring(m.t))
  if #body > (max or M.MAX_FRAME) then
    return nil, string.format("EMSGSIZE: message %s is %d bytes, over the %d-byte bound",
      tostring(m.t), #body, max or M.MAX_FRAME)
  end
  return be32(#body) .. body
end

function Conn:send(m, timeout)
  if self.closed then return nil, "EPIPE: " .. self.what .. ": connection closed" end
  local f, err = M.frame(m, self.max)
  if not f then return nil, err end
  -- one frame at a time on the socket
  if self.sending then
    local ok = task.wait(function() return not self.sending or self.closed end, timeout or 30)
    if not ok then return nil, "ETIMEDOUT: " .. self.what .. ": send queue did not drain" end
    if self.closed then return nil, "EPIPE: " .. self.what .. ": connection closed" end
  end
  self.sending = true
  local ok, serr = self.sock:send(f, timeout or 30)
  self.sending = false
  if not ok then return nil, string.format("%s (sending %s to %s)", serr, tostring(m.t), self.what) end
  return true
end

-- Validate a decoded frame: an object with a string type.
function M.check(m, what)
  if type(m) ~= "table" or type(m.t) ~= "string" or #m.t > 32 then
    return nil, "EPROTO: " .. what .. ": a frame that is not a typed message object"
  end
  return m
end

-- The next message. timeout bounds the whole frame once its first byte is
-- awaited (nil: wait forever for the header, as an idle agent does).
function Conn:recv(timeout, body_timeout)
  if self.closed then return nil, "EPIPE: " .. self.what .. ": connection closed" end
  local h, err = self.sock:recv(M.HEADER, timeout)
  if not h then return nil, err end
  local n = read_be32(h)
  if n < 2 or n > self.max then
    return nil, string.format("EPROTO: %s: frame of %d bytes announced (bound %d)", self.what, n,
      self.max)
  end
  local body, berr = self.sock:recv(n, body_timeout or 30)
  if not body then return nil, berr end
  local m, derr = json.decode(body, self.what)
  if not m then return nil, derr end
  return M.check(m, self.what)
end

function Conn:close()
  if self.closed then return end
  self.closed = true
  self.sock:close()
end

return M
