-- link_spec.lua - links as Lua objects: a custom caps exchange (llama.cpp's
-- HELLO), the loop staying alive while a link waits, zero-copy buffers,
-- stats and info, timeouts, and misuse raising.
local ffi = require("ffi")
local tbrt = require("tbrt")
local task = require("tbrt.task")
local caps = require("tbrt.caps")
local L = require("links")

-- llama.cpp's RPC HELLO: the client sends command 14 and a u64 length (24)
-- followed by its 24-byte caps; the server answers a u64 length (28) and
-- {major, minor, patch, pad, caps[24]}. All-zero caps mean stay on TCP.
local RPC_CMD_HELLO = 14
local function u64le(n)
  local b = {}
  for i = 1, 8 do b[i] = string.char(n % 256); n = math.floor(n / 256) end
  return table.concat(b)
end
local function read_u64le(s)
  local n = 0
  for i = 8, 1, -1 do n = n * 256 + s:byte(i) end
  return n
end

local function hello(sock, mine, role, timeout)
  if role == "client" then
    local ok, err = sock:send(string.char(RPC_CMD_HELLO) .. u64le(#mine) .. mine, timeout)
    if not ok then return nil, err end
    local len = sock:recv(8, timeout)
    if not len then return nil, "EPROTO: hello: no reply length" end
    if read_u64le(len) ~= 28 then return nil, "EPROTO: hello: reply of " .. read_u64le(len) .. " bytes" end
    local rsp, err2 = sock:recv(28, timeout)
    if not rsp then return nil, err2 end
    assert(rsp:byte(1) == 3, "major version")
    return rsp:sub(5)
  else
    local head, err = sock:recv(9, timeout)
    if not head then return nil, err end
    if head:byte(1) ~= RPC_CMD_HELLO then return nil, "EPROTO: hello: command " .. head:byte(1) end
    local n = read_u64le(head:sub(2))
    if n ~= 24 then return nil, "EPROTO: hello: caps of " .. n .. " bytes" end
    local peer, err2 = sock:recv(24, timeout)
    if not peer then return nil, err2 end
    local ok, err3 = sock:send(u64le(28) .. string.char(3, 0, 0, 0) .. mine, timeout)
    if not ok then return nil, err3 end
    return peer
  end
end

describe("links", function()
  it("set up through a custom caps exchange (llama.cpp's HELLO)", L.async(function()
    local seen = {}
    local spy = function(sock, mine, role, timeout)
      local peer, err = hello(sock, mine, role, timeout)
      seen[role] = peer
      return peer, err
    end
    local a, b = L.pair({ device = "soft", personality = "apple-uc", exchange = spy })
    assert(a and b)
    assert.equal(b:caps(), seen.client)
    assert.equal(a:caps(), seen.server)
    local c = assert(caps.decode(seen.client, "apple"))
    assert.equal(b:info().qpn, c.qpn)
    assert(a:send("after hello")) ; assert(a:flush())
    assert.equal("after hello", b:recv(11, 5))
    a:close() ; b:close()
  end))

  it("stay on TCP when the HELLO carries all-zero caps", L.async(function()
    -- the client offers no RDMA: it says so with the caps it sent
    local zero = function(sock, mine, role, timeout)
      local sent = role == "client" and caps.NONE or mine
      local peer, err = hello(sock, sent, role, timeout)
      return peer, err, sent
    end
    local a, b = L.pair({ device = "soft", exchange = zero })
    assert.equal("tcp", a:info().kind)
    assert.equal("tcp", b:info().kind)
    assert(b:send("fallback")) ; assert(b:flush())
    assert.equal("fallback", a:recv(8, 5))
    a:close() ; b:close()
  end))

  it("refuse a peer without RDMA under fallback = false; mark one that is accepted", L.async(function()
    -- L.pair(client opts, server opts): the client has no RDMA to offer
    local a, b, aerr, berr = L.pair({ device = "tcp" }, { device = "soft", fallback = false })
    assert.is_nil(b)
    assert.matches("^ENOTSUP: link %d+: caps exchange: the peer offers no RDMA %(it sent all%-zero " ..
      "caps: it asked for tcp, or has no usable device%) and this side asked for soft0 with " ..
      "fallback = false", berr)
    assert.is_nil(a)
    assert.matches("readiness", aerr)
    a, b = L.pair({ device = "tcp" }, { device = "soft" })
    assert(a and b)
    assert.equal("tcp", b:info().kind)
    assert.is_true(b.peer_no_rdma)
    assert.is_nil(a.peer_no_rdma)        -- it offered none itself
    a:close() ; b:close()
  end))

  it("end a wait with ECANCELED when another task closes the link meanwhile", L.async(function()
    for _, device in ipairs({ "soft", "tcp" }) do
      local a, b = L.pair({ device = device })
      local waiter = task.spawn(function() return b:recv(10, 5) end)
      task.sleep(0.05)
      assert(b:close())
      local data, err = waiter:join(5)
      assert.is_nil(data)
      assert.matches("^ECANCELED: link %d+: recv: the link was closed %(by another task%) while " ..
        "this one waited", err)
      a:close()
    end
  end))

  it("keep the loop running while a recv waits: a timer fires meanwhile", L.async(function()
    local a, b = L.pair({ device = "soft" })
    local ticks = 0
    local timer = require("luv").new_timer()
    timer:start(10, 10, function() ticks = ticks + 1 end)
    require("luv").update_time()   -- the sleep's timer starts from now, not a stale loop time
    local t0 = tbrt.now()
    local r = task.spawn(function() return b:recv(5, 5) end)
    task.sleep(0.1)
    assert(a:send("later")) ; assert(a:flush())
    assert.equal("later", assert(r:join(5)))
    timer:stop() ; timer:close()
    assert.is_true(ticks >= 5, "the timer fired " .. ticks .. " times while recv waited")
    assert.is_true(tbrt.now() - t0 >= 0.1)
    local s = b:stats()
    assert.is_true(s.sleeps >= 1, "the waiting recv slept on the completion fd")
    a:close() ; b:close()
  end))

  it("move cdata buffers without copies through Lua strings", L.async(function()
    local a, b = L.pair({ device = "soft", personality = "linux-rc" })
    local n = 3 * 1024 * 1024 + 5
    local src, dst = L.pattern(n, 3), ffi.new("uint8_t[?]", n)
    local sender = task.spawn(function() assert(a:send(src, n)) return assert(a:flush()) end)
    assert.equal(n, b:recv_into(dst, n, 10))
    assert(sender:join(5))
    assert.is_nil(L.check(dst, n, 3))
    a:close() ; b:close()
  end))

  it("report stats, info and a readable tostring", L.async(function()
    local a, b = L.pair({ device = "soft", personality = "apple-uc" })
    assert(a:send(string.rep("z", 200000))) ; assert(a:flush())
    assert(b:recv(200000, 5))
    local s = a:stats()
    assert.equal(200000, s.bytes_sent)
    assert.equal(2, s.frames_sent)
    assert.equal(200000, b:stats().bytes_recv)
    local i = a:info()
    assert.same({ "ready", "soft0", "apple-uc", "fixed", "UC", 16, 131072 },
      { i.state, i.device, i.personality, i.framing, i.qp_type, i.nbuf, i.stride })
    assert.matches("^<link %d+ soft0 apple%-uc RTS sent=195%.3KiB recv=0B>$", tostring(a))
    a:close() ; b:close()
    assert.matches("^<link %d+ closed>$", tostring(a))
  end))

  it("time out a recv without breaking the link", L.async(function()
    local a, b = L.pair({ device = "soft" })
    b:settimeouts(0.05)
    local data, err = b:recv(1)
    assert.is_nil(data)
    assert.matches("^ETIMEDOUT: link %d+: recv: 0 of 1 bytes arrived within 0%.05 s", err)
    assert(a:send("!")) ; assert(a:flush())
    assert.equal("!", b:recv(1, 5))
    a:close() ; b:close()
  end))

  it("raise on misuse and return errors for failures", L.async(function()
    assert.has_error(function() tbrt.listen("127.0.0.1", 0, { devcie = "soft" }) end,
      "unknown link option \"devcie\" (valid: connect_timeout, device, eager, exchange, fallback, faults, framing, gid_index, liveness, nbuf, pcap, pci, personality, port, ports, qp_type, spin, stall, stride, timeout, trace, wire)")
    assert.has_error(function() tbrt.listen("127.0.0.1", 0, { nbuf = "16" }) end,
      "link option nbuf must be a number, got string")
    assert.has_error(function() tbrt.listen("127.0.0.1", 0, { framing = "elastic" }) end)
    local a, b = L.pair({ device = "soft" })
    assert.has_error(function() a:send(42) end)
    assert.has_error(function() a:recv(-1) end)
    a:close()
    assert.has_error(function() a:send("x") end, "link is closed")
    local l, err = tbrt.connect("127.0.0.1", 1, { device = "soft", connect_timeout = 2 })
    assert.is_nil(l)
    assert.matches("^ECONNREFUSED", err)
    b:close()
    local x, y, xerr = L.pair({ device = "soft", nbuf = 1 })
    assert.is_nil(x)
    assert.matches("^EINVAL: link %d+: nbuf 1 out of range 2..4096", xerr)
    if y then y:close() end
  end))

  -- the bounded spin a wait loop of its own (Lua's recv_into) starts with
  it("tbrt_link_recv_looking looks again while nothing came, as often as asked and no more, "
    .. "and counts one EAGAIN a call", L.async(function()
    local C = require("tbrt.ffi").C
    local cjson = require("cjson")
    local opts = { personality = "linux-rc" }
    local srv = assert(tbrt.listen("127.0.0.1", 0, opts))
    local peer = L.spawn_peer({ "echo", srv.port, cjson.encode(opts), 64 })
    local l = assert(srv:accept(20))
    srv:close()
    local buf = ffi.new("uint8_t[64]")
    -- nothing sent yet, so nothing comes back: EAGAIN whatever the looks
    for _, looks in ipairs({ 0, 1000 }) do
      local e0 = l:stats().eagain
      assert.equal(-11, tonumber(C.tbrt_link_recv_looking(l._l, buf, 64, looks)))
      assert.equal(e0 + 1, l:stats().eagain, "one call, one EAGAIN (" .. looks .. " looks)")
    end
    -- the echo comes from the other process some time after the send (a
    -- recv at once would miss it): enough looks (about a second's worth, a
    -- bound for a slow machine) find it, without any wait of Lua's
    assert(l:send(L.pattern(64, 64), 64))
    assert(l:flush())
    local got = tonumber(C.tbrt_link_recv_looking(l._l, buf, 64, 10000000))
    assert.equal(64, got, got < 0 and ffi.string(C.tbrt_link_why(l._l)) or nil)
    assert.is_nil(L.check(buf, 64, 64))
    local r = peer:wait(20)
    assert.equal(0, r.code, r.stderr)
    assert.equal(-22, tonumber(C.tbrt_link_recv_looking(nil, buf, 64, 1)))   -- EINVAL
    assert(l:close())
  end))
end)
