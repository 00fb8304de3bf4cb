-- tbrt/ggml_rpc.lua - llama.cpp's ggml-rpc protocol from Lua: commands and
-- replies over a link or the plain bootstrap socket, the HELLO exchange as
-- client and as server with llama.cpp's version checks, and the exchange
-- hook that makes tbrt.connect/listen set up an RDMA link the way
-- llama.cpp's client and server do.
--
--   local ggml_rpc = require("tbrt.ggml_rpc")
--   local rpc = ggml_rpc.new()                      -- or new{ version =, commands = }
--   local l = assert(tbrt.connect(host, port, { framing = "llama-apple",
--     exchange = rpc:hello_exchange() }))
--   local reply = assert(rpc:call(l, "GET_DEVICE_MEMORY", "\0\0\0\0", 16))
--   -- a server: local cmd, payload = rpc:recv_command(l); rpc:send_reply(l, data)
--
-- On the wire (little endian): a command is {u8 cmd, u64 size, payload}, a
-- reply {u64 size, payload}. HELLO, always command 14, carries the 24-byte
-- caps and is answered by 28 bytes {u8 major, minor, patch, pad, caps[24]};
-- both go over the plain socket, before the link is activated. llama.cpp's
-- server drops a client (closes the socket, no reply) whose first command is
-- not HELLO or whose HELLO is not 24 bytes, and any unknown command later;
-- its client refuses a server whose major differs or whose minor is higher,
-- and aborts on a reply of the wrong size.
--
-- Every field goes out in a send call of its own, as llama.cpp's send_data
-- calls do, then one flush per message: on llama-linux framing each send
-- call is one SEND that the peer's read takes whole, so the boundaries must
-- be llama.cpp's; on the other framings the fields coalesce until the flush.
--
-- Command numbers and the version are data (they change between llama.cpp
-- releases): ggml_rpc.PROTOCOL is the default; pass another to new().
-- Sizes read from the peer are bounded by max_payload before anything is
-- allocated. Errors are luv's: nil, "EPROTO: ggml_rpc: ..."; misuse raises.
local ffi = require("ffi")
local link = require("tbrt.link")

local M = {}

M.CAPS_SIZE = 24
M.HELLO_REPLY_SIZE = 28
M.HELLO = 14                     -- llama.cpp static_asserts RPC_CMD_HELLO == 14

-- ggml/include/ggml-rpc.h and ggml/src/ggml-rpc/ggml-rpc.cpp (enum rpc_cmd)
-- of llama.cpp at commit 02d1e60, where the two agree: protocol 7.0.1.
M.PROTOCOL = {
  version = { 7, 0, 1 },
  commands = {
    ALLOC_BUFFER = 0, GET_ALIGNMENT = 1, GET_MAX_SIZE = 2, BUFFER_GET_BASE = 3,
    FREE_BUFFER = 4, BUFFER_CLEAR = 5, SET_TENSOR = 6, SET_TENSOR_HASH = 7, GET_TENSOR = 8,
    COPY_TENSOR = 9, GRAPH_COMPUTE = 10, GET_DEVICE_MEMORY = 11, INIT_TENSOR = 12,
    GET_ALLOC_SIZE = 13, HELLO = 14, DEVICE_COUNT = 15, GRAPH_RECOMPUTE = 16,
    MEMSET_TENSOR = 17, NONE = 18, GET_DEVICE_SUPPORTS_OP = 19,
  },
}

M.MAX_PAYLOAD = 256 * 1024 * 1024

local Rpc = {}
Rpc.__index = Rpc
M.Rpc = Rpc

local NEW_KEYS = { version = true, commands = true, max_payload = true }

-- A protocol: version = { major, minor, patch }, commands = { NAME = number }
-- (HELLO must be 14), max_payload = the largest size accepted from a peer.
function M.new(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("ggml_rpc.new: options must be a table", 2) end
  for k in pairs(opts) do
    if not NEW_KEYS[k] then
      error(string.format("ggml_rpc.new: unknown option %q (valid: commands, max_payload, version)",
        tostring(k)), 2)
    end
  end
  local version = opts.version or M.PROTOCOL.version
  if type(version) ~= "table" or #version ~= 3 then
    error("ggml_rpc.new: version must be { major, minor, patch }", 2)
  end
  for _, v in ipairs(version) do
    if type(v) ~= "number" or v < 0 or v > 255 or v % 1 ~= 0 then
      error("ggml_rpc.new: version numbers are bytes (0..255)", 2)
    end
  end
  local commands = opts.commands or M.PROTOCOL.commands
  if type(commands) ~= "table" then error("ggml_rpc.new: commands must be a table", 2) end
  local names, count = {}, 0
  for name, n in pairs(commands) do
    if type(name) ~= "string" or type(n) ~= "number" or n < 0 or n > 255 or n % 1 ~= 0 then
      error("ggml_rpc.new: commands map names to command bytes (0..255)", 2)
    end
    if names[n] then error(string.format("ggml_rpc.new: commands %s and %s are both %d",
      names[n], name, n), 2) end
    names[n] = name
    count = math.max(count, n + 1)
  end
  if commands.HELLO ~= M.HELLO then
    error("ggml_rpc.new: HELLO must be command 14 (llama.cpp fixes it across releases)", 2)
  end
  local max = opts.max_payload or M.MAX_PAYLOAD
  if type(max) ~= "number" or max < M.HELLO_REPLY_SIZE then
    error("ggml_rpc.new: max_payload must be a byte count >= 28", 2)
  end
  return setmetatable({ version = { version[1], version[2], version[3] }, commands = commands,
    names = names, count = count, max_payload = max }, Rpc)
end

-- The number and name of a command given by either.
function Rpc:command(cmd)
  if type(cmd) == "number" then
    if cmd < 0 or cmd > 255 or cmd % 1 ~= 0 then error("ggml_rpc: command byte " .. cmd, 3) end
    return cmd, self.names[cmd] or tostring(cmd)
  end
  local n = self.commands[cmd]
  if not n then error("ggml_rpc: unknown command " .. tostring(cmd), 3) end
  return n, cmd
end

function Rpc:version_text(v)
  v = v or self.version
  return string.format("%d.%d.%d", v[1], v[2], v[3])
end

---------------------------------------------------------------------------
-- The connection: a link (tbrt.link) or a plain socket (tbrt.sock).

local function is_link(conn) return getmetatable(conn) == link.Link end

local function put(conn, data, len, timeout)
  if is_link(conn) then return conn:send(data, len, timeout) end
  if type(data) ~= "string" then data = ffi.string(data, len) end
  return conn:send(data, timeout)
end

local function finish(conn, timeout)
  if is_link(conn) then return conn:flush(timeout) end
  return true
end

local function get(conn, n, timeout)
  if n == 0 then return "" end
  return conn:recv(n, timeout)
end

function M.u64(n)
  local lo = n % 4294967296
  local hi = (n - lo) / 4294967296
  return string.char(lo % 256, math.floor(lo / 256) % 256, math.floor(lo / 65536) % 256,
    math.floor(lo / 16777216) % 256, hi % 256, math.floor(hi / 256) % 256,
    math.floor(hi / 65536) % 256, math.floor(hi / 16777216) % 256)
end

-- An 8-byte little-endian size, or nil when it is beyond 2^53.
function M.read_u64(s)
  local b = { s:byte(1, 8) }
  local hi = b[5] + b[6] * 256 + b[7] * 65536 + b[8] * 16777216
  if hi >= 2 ^ 21 then return nil end
  return b[1] + b[2] * 256 + b[3] * 65536 + b[4] * 16777216 + hi * 4294967296
end

local function as_payload(payload, len, what)
  if payload == nil then return "", 0 end
  if type(payload) == "string" then return payload, len or #payload end
  if type(payload) == "cdata" then
    if not len then error(what .. ": a cdata payload needs a length", 3) end
    return payload, len
  end
  error(what .. ": payload must be a string or a cdata buffer, got " .. type(payload), 3)
end

local function err_of(what, err) return nil, (err or "EIO: unknown") .. " (ggml_rpc: " .. what .. ")" end

-- Read a size field and bound it; what names the field in the message.
function Rpc:_size(conn, what, timeout)
  local s, err = get(conn, 8, timeout)
  if not s then return err_of(what, err) end
  local n = M.read_u64(s)
  if not n or n > self.max_payload then
    return nil, string.format("EMSGSIZE: ggml_rpc: %s of %s bytes, more than max_payload %d " ..
      "(nothing was allocated; close the connection)", what,
      n and tostring(n) or ("0x" .. s:reverse():gsub(".", function(c)
        return string.format("%02x", c:byte()) end)), self.max_payload)
  end
  return n
end

---------------------------------------------------------------------------
-- Commands and replies.

-- {u8 cmd, u64 size, payload}, then the flush that ends a message.
function Rpc:send_command(conn, cmd, payload, len, timeout)
  local n = self:command(cmd)
  local p, plen = as_payload(payload, len, "send_command")
  local ok, err = put(conn, string.char(n), nil, timeout)
  if ok then ok, err = put(conn, M.u64(plen), nil, timeout) end
  if ok and plen > 0 then ok, err = put(conn, p, plen, timeout) end
  if ok then ok, err = finish(conn, timeout) end
  if not ok then return err_of("send command " .. n, err) end
  return true
end

-- The next command: name (or number when unnamed), payload (a string),
-- number. An unknown command is refused before its size is read, as
-- llama.cpp's server refuses it.
function Rpc:recv_command(conn, timeout)
  local c, err = get(conn, 1, timeout)
  if not c then return err_of("receive a command", err) end
  local n = c:byte()
  if n >= self.count or not self.names[n] then
    return nil, string.format("EPROTO: ggml_rpc: unknown command %d (protocol %s has 0..%d; " ..
      "llama.cpp's server drops the client)", n, self:version_text(), self.count - 1)
  end
  local size, serr = self:_size(conn, self.names[n] .. " size", timeout)
  if not size then return nil, serr end
  local payload, perr = get(conn, size, timeout)
  if not payload then return err_of(self.names[n] .. " payload", perr) end
  return self.names[n], payload, n
end

-- {u64 size, payload}, flushed.
function Rpc:send_reply(conn, payload, len, timeout)
  local p, plen = as_payload(payload, len, "send_reply")
  local ok, err = put(conn, M.u64(plen), nil, timeout)
  if ok and plen > 0 then ok, err = put(conn, p, plen, timeout) end
  if ok then ok, err = finish(conn, timeout) end
  if not ok then return err_of("send a reply", err) end
  return true
end

-- A reply; with expect, its size must be exactly that (llama.cpp's client
-- gives up on any other).
function Rpc:recv_reply(conn, expect, timeout)
  local size, err = self:_size(conn, "reply size", timeout)
  if not size then return nil, err end
  if expect and size ~= expect then
    return nil, string.format("EPROTO: ggml_rpc: a reply of %d bytes, expected %d", size, expect)
  end
  local payload, perr = get(conn, size, timeout)
  if not payload then return err_of("reply payload", perr) end
  return payload
end

-- A command and its reply.
function Rpc:call(conn, cmd, payload, expect, timeout)
  local ok, err = self:send_command(conn, cmd, payload, nil, timeout)
  if not ok then return nil, err end
  return self:recv_reply(conn, expect, timeout)
end

---------------------------------------------------------------------------
-- HELLO.

local function check_caps(caps, what)
  if type(caps) ~= "string" or #caps ~= M.CAPS_SIZE then
    error(what .. ": caps must be a 24-byte string", 3)
  end
end

-- The client side: HELLO with our caps. Returns the server's caps and its
-- version { major, minor, patch }, or nil, err when llama.cpp's client
-- would refuse the server.
function Rpc:hello(conn, caps, timeout)
  check_caps(caps, "hello")
  local ok, err = self:send_command(conn, M.HELLO, caps, nil, timeout)
  if not ok then return nil, err end
  local size, serr = self:_size(conn, "HELLO reply size", timeout)
  if not size then return nil, serr end
  if size ~= M.HELLO_REPLY_SIZE then
    return nil, string.format("EPROTO: ggml_rpc: a HELLO reply of %d bytes, not %d (llama.cpp's " ..
      "client aborts: the server crashed or returned a malformed response)", size,
      M.HELLO_REPLY_SIZE)
  end
  local rsp, rerr = get(conn, M.HELLO_REPLY_SIZE, timeout)
  if not rsp then return err_of("HELLO reply", rerr) end
  local v = { rsp:byte(1, 3) }
  local mine = self.version
  if v[1] ~= mine[1] or v[2] > mine[2] then
    return nil, string.format("EPROTO: ggml_rpc: RPC server version mismatch: %s (ours %s: the " ..
      "major must be equal and the server's minor not higher)", self:version_text(v),
      self:version_text())
  end
  return rsp:sub(5), v
end

-- The server side: the client's HELLO, answered with our caps (a string, or
-- a function(client_caps) returning one). Returns the client's caps, or nil,
-- err when llama.cpp's server would drop the client (the caller closes the
-- connection then: llama.cpp sends nothing back).
function Rpc:serve_hello(conn, caps, timeout)
  if type(caps) ~= "function" then check_caps(caps, "serve_hello") end
  local c, err = get(conn, 1, timeout)
  if not c then return err_of("receive HELLO", err) end
  if c:byte() ~= M.HELLO then
    return nil, string.format("EPROTO: ggml_rpc: the first command is %d, not HELLO (14): " ..
      "llama.cpp's server drops such a client (\"Expected HELLO command, update client\")", c:byte())
  end
  local s, serr = get(conn, 8, timeout)
  if not s then return err_of("HELLO size", serr) end
  local size = M.read_u64(s)
  if size ~= M.CAPS_SIZE then
    return nil, string.format("EPROTO: ggml_rpc: a HELLO of %s bytes, not %d: llama.cpp's server " ..
      "drops such a client (\"HELLO request size mismatch\")", tostring(size or "2^53+"),
      M.CAPS_SIZE)
  end
  local peer, perr = get(conn, M.CAPS_SIZE, timeout)
  if not peer then return err_of("HELLO caps", perr) end
  local mine = caps
  if type(caps) == "function" then
    mine = caps(peer)
    check_caps(mine, "serve_hello")
  end
  local v = self.version
  local ok, werr = self:send_reply(conn, string.char(v[1], v[2], v[3], 0) .. mine, nil, timeout)
  if not ok then return nil, werr end
  return peer
end

-- The caps exchange hook for tbrt.connect / tbrt.listen (opts.exchange):
-- the client sends HELLO, the server answers it; both then activate with
-- the peer's caps, as llama.cpp does. on_hello(role, peer_caps, version),
-- if given, sees each HELLO.
function Rpc:hello_exchange(on_hello)
  return function(sock, mine, role, timeout)
    if role == "client" then
      local peer, v = self:hello(sock, mine, timeout)
      if peer and on_hello then on_hello(role, peer, v) end
      return peer, v
    end
    local peer, err = self:serve_hello(sock, mine, timeout)
    if peer and on_hello then on_hello(role, peer) end
    return peer, err
  end
end

-- ggml_rpc.hello_exchange(opts): new(opts):hello_exchange().
function M.hello_exchange(opts, on_hello)
  return M.new(opts):hello_exchange(on_hello)
end

return M
