-- ggml_rpc_spec.lua - tbrt.ggml_rpc: the command and reply layout on the
-- plain socket, HELLO refused as llama.cpp refuses it (server: a first
-- command that is not HELLO, a HELLO that is not 24 bytes; client: a
-- server whose major differs or whose minor is higher, a reply that is not
-- 28 bytes), sizes from the peer bounded before allocation, and the
-- protocol (command numbers, version) as data.
local tbrt = require("tbrt")
local task = require("tbrt.task")
local ggml_rpc = require("tbrt.ggml_rpc")
local L = require("links")

local u64 = ggml_rpc.u64
local CAPS = string.rep("\0", 24)

-- A connected pair of plain sockets in this process.
local function sockets()
  local srv = assert(tbrt.tcp_listen("127.0.0.1", 0))
  local t = task.spawn(function() return srv:accept(5) end)
  local c = assert(tbrt.tcp_connect("127.0.0.1", srv.port, 5))
  local s = assert(t:join(5))
  srv:close()
  return c, s
end

-- What a raw peer reads until the other side closes (bounded).
local function read_all(sock, timeout)
  local got = {}
  while true do
    local b = sock:recv(1, timeout)
    if not b then return table.concat(got) end
    got[#got + 1] = b
  end
end

describe("ggml_rpc on the plain socket", function()
  it("puts a command as {u8 cmd, u64 size, payload} and a reply as {u64 size, payload}",
    L.async(function()
      local rpc = ggml_rpc.new()
      local c, s = sockets()
      assert(rpc:send_command(c, "SET_TENSOR", "abc"))
      assert.equal("\6" .. u64(3) .. "abc", s:recv(12, 5))
      assert(rpc:send_command(c, "DEVICE_COUNT"))
      assert.equal("\15" .. u64(0), s:recv(9, 5))
      assert(rpc:send_reply(s, "\1\0\0\0"))
      assert.equal("\1\0\0\0", rpc:recv_reply(c, 4, 5))
      -- and back through recv_command
      assert(rpc:send_command(c, 11, "\0\0\0\0"))
      local name, payload, n = rpc:recv_command(s, 5)
      assert.same({ "GET_DEVICE_MEMORY", "\0\0\0\0", 11 }, { name, payload, n })
      c:close() s:close()
    end))

  it("refuses an unknown command before reading its size, and sizes beyond max_payload",
    L.async(function()
      -- an older release whose commands end at GRAPH_RECOMPUTE (16)
      local old = {}
      for k, v in pairs(ggml_rpc.PROTOCOL.commands) do if v <= 16 then old[k] = v end end
      local rpc = ggml_rpc.new { version = { 3, 0, 0 }, commands = old, max_payload = 1024 }
      local c, s = sockets()
      c:send("\19")
      local name, err = rpc:recv_command(s, 5)
      assert.is_nil(name)
      assert.equal("EPROTO: ggml_rpc: unknown command 19 (protocol 3.0.0 has 0..16; llama.cpp's " ..
        "server drops the client)", err)
      c:send("\6" .. u64(2 ^ 40))
      name, err = rpc:recv_command(s, 5)
      assert.is_nil(name)
      assert.matches("^EMSGSIZE: ggml_rpc: SET_TENSOR size of 1099511627776 bytes, more than " ..
        "max_payload 1024 %(nothing was allocated", err)
      c:send(string.rep("\255", 8))
      name, err = rpc:recv_reply(s, nil, 5)
      assert.is_nil(name)
      assert.matches("^EMSGSIZE: ggml_rpc: reply size of 0xffffffffffffffff bytes", err)
      c:close() s:close()
    end))

  it("takes command numbers and version as data, and checks them", function()
    assert.has_error(function() ggml_rpc.new { commands = { HELLO = 13 } } end,
      "ggml_rpc.new: HELLO must be command 14 (llama.cpp fixes it across releases)")
    assert.has_error(function() ggml_rpc.new { commands = { HELLO = 14, A = 1, B = 1 } } end)
    assert.has_error(function() ggml_rpc.new { version = { 1, 2 } } end,
      "ggml_rpc.new: version must be { major, minor, patch }")
    assert.has_error(function() ggml_rpc.new { veriosn = { 1, 2, 3 } } end)
    local rpc = ggml_rpc.new { commands = { HELLO = 14, PING = 200 } }
    assert.same({ 200, "PING" }, { rpc:command("PING") })
    assert.has_error(function() rpc:command("SET_TENSOR") end, "ggml_rpc: unknown command SET_TENSOR")
  end)
end)

describe("HELLO as llama.cpp's server answers it", function()
  local function serve(case_bytes)
    local srv = assert(tbrt.listen("127.0.0.1", 0, { device = "soft", personality = "apple-uc",
      framing = "llama-apple", exchange = ggml_rpc.hello_exchange() }))
    local t = task.spawn(function() return srv:accept(5) end)
    local c = assert(tbrt.tcp_connect("127.0.0.1", srv.port, 5))
    assert(c:send(case_bytes))
    local l, err = t:join(10)
    srv:close()
    local back = read_all(c, 5)
    c:close()
    return l, err, back
  end

  for _, case in ipairs {
    { "a HELLO of 23 bytes", "\14" .. u64(23) .. string.rep("\0", 23),
      "a HELLO of 23 bytes, not 24: llama.cpp's server drops such a client" },
    { "a HELLO of 25 bytes", "\14" .. u64(25) .. string.rep("\0", 25),
      "a HELLO of 25 bytes, not 24" },
    { "a HELLO of 2^63 bytes", "\14" .. string.rep("\0", 7) .. "\128", "a HELLO of 2^53%+ bytes" },
    { "a first command that is not HELLO", "\15" .. u64(0),
      "the first command is 15, not HELLO %(14%): llama.cpp's server drops such a client" },
  } do
    it("drops the client without a word on " .. case[1], L.async(function()
      local l, err, back = serve(case[2])
      assert.is_nil(l)
      assert.matches("^EPROTO: ggml_rpc: " .. case[3], err)
      assert.equal("", back, "llama.cpp's server sends nothing back")
    end))
  end

  it("answers a good HELLO with its version and caps, both then on TCP for zero caps",
    L.async(function()
      local l, err, back
      local srv = assert(tbrt.listen("127.0.0.1", 0, { device = "soft", personality = "apple-uc",
        framing = "llama-apple", exchange = ggml_rpc.hello_exchange() }))
      local t = task.spawn(function() return srv:accept(5) end)
      local c = assert(tbrt.tcp_connect("127.0.0.1", srv.port, 5))
      assert(c:send("\14" .. u64(24) .. CAPS))
      back = assert(c:recv(8 + 28, 5))
      l, err = t:join(10)
      srv:close()
      assert(l, err)
      assert.equal(u64(28) .. "\7\0\1\0", back:sub(1, 12))
      assert.equal(24, #back:sub(13))
      assert.is_true(back:sub(13) ~= CAPS, "the server offers its RDMA caps")
      -- the client offered none: TCP, and the next command comes over it
      assert.equal("tcp", l:info().kind)
      assert(c:send("\11" .. u64(4) .. "\0\0\0\0"))
      local name, payload = ggml_rpc.new():recv_command(l, 5)
      assert.same({ "GET_DEVICE_MEMORY", "\0\0\0\0" }, { name, payload })
      l:close() c:close()
    end))
end)

describe("HELLO as llama.cpp's client checks the server", function()
  local function against(reply)
    local srv = assert(tbrt.tcp_listen("127.0.0.1", 0))
    local seen
    local t = task.spawn(function()
      local s = assert(srv:accept(5))
      seen = s:recv(33, 5)
      s:send(reply)
      read_all(s, 5)            -- until the client closes
      s:close()
      return true
    end)
    local l, err = tbrt.connect("127.0.0.1", srv.port, { device = "soft", personality = "apple-uc",
      framing = "llama-apple", exchange = ggml_rpc.hello_exchange(), timeout = 5 })
    local kind = l and l:info().kind
    if l then l:close() end
    assert(t:join(10))
    srv:close()
    return l, err, seen, kind
  end

  for _, case in ipairs {
    { "a different major", "\8\0\1", "RPC server version mismatch: 8.0.1 %(ours 7.0.1" },
    { "an older major", "\6\9\9", "RPC server version mismatch: 6.9.9" },
    { "a higher minor", "\7\1\0", "RPC server version mismatch: 7.1.0" },
  } do
    it("refuses " .. case[1], L.async(function()
      local l, err, seen = against(u64(28) .. case[2] .. "\0" .. CAPS)
      assert.is_nil(l)
      assert.matches("^EPROTO: ggml_rpc: " .. case[3], err)
      assert.equal("\14" .. u64(24), seen:sub(1, 9))
    end))
  end

  it("refuses a reply that is not 28 bytes", L.async(function()
    local l, err = against(u64(27) .. string.rep("\0", 27))
    assert.is_nil(l)
    assert.matches("^EPROTO: ggml_rpc: a HELLO reply of 27 bytes, not 28 %(llama.cpp's client " ..
      "aborts", err)
  end))

  it("accepts a lower minor and any patch (zero caps: both on TCP)", L.async(function()
    local l, err, _, kind = against(u64(28) .. "\7\0\0\0" .. CAPS)
    assert(l, err)
    assert.equal("tcp", kind)
  end))
end)
