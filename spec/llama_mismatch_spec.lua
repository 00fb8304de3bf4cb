-- llama_mismatch_spec.lua - tbrt's own framing cannot be taken for
-- llama.cpp's: its header has a magic of its own ("TBRT", not "RSEG"), and
-- an end that meets the other framing fails at once with a message naming
-- both, while the other end fails within the liveness bound (a tbrt end by
-- the notice byte on the bootstrap socket; the llama.cpp-like peer as
-- llama.cpp does). On Linux the two already part at activation: llama.cpp's
-- caps carry psn = qpn & 0xffffff, tbrt's never do.
local cjson = require("cjson")
local tbrt = require("tbrt")
local task = require("tbrt.task")
local ggml_rpc = require("tbrt.ggml_rpc")
local L = require("links")

local LIVENESS = 1.0

local function speaks(framing)
  local what = ({ tbrt = "16%-byte TBRT header", ["llama-apple"] = "8%-byte RSEG header",
    ["llama-linux"] = "no frame header" })[framing]
  return "peer speaks " .. framing:gsub("%-", "%%-") .. " framing %(" .. what ..
    ".-%); open the link with framing = '" .. framing:gsub("%-", "%%-") .. "'"
end

local function opts(pers, framing, extra)
  local o = { device = "soft", personality = pers, framing = framing, fallback = false,
    liveness = LIVENESS, timeout = 10 }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

describe("tbrt framing against llama-apple framing (soft apple-uc)", function()
  for _, dir in ipairs { { "tbrt", "llama-apple" }, { "llama-apple", "tbrt" } } do
    it(string.format("a %s sender and a %s receiver both fail, naming each other", dir[1], dir[2]),
      L.async(function()
        local a, b = L.pair(opts("apple-uc", dir[1]), opts("apple-uc", dir[2]))
        assert(a and b)
        -- both are up: the readiness bytes are the same in both framings
        local t0 = tbrt.now()
        local waiting = task.spawn(function() return select(2, a:recv(1, 10)) end)
        assert(a:send("hello")) ; assert(a:flush())
        local data, err = b:recv(5, 10)
        assert.is_nil(data)
        assert.matches("^EPROTO: link %d+: recv: a frame with .-: " .. speaks(dir[1]) ..
          " %(this link speaks " .. dir[2]:gsub("%-", "%%-") .. " framing%)$", err)
        local aerr = waiting:join(10)
        local dt = tbrt.now() - t0
        assert.matches("^EPROTO: link %d+: bootstrap socket: the peer's notice byte: " ..
          speaks(dir[2]), aerr)
        assert.is_true(dt < LIVENESS, "the sender failed after " .. dt .. " s")
        a:close() b:close()
      end))
  end
end)

describe("tbrt framing against llama-linux framing (soft linux-rc)", function()
  it("both fail at activation, naming each other", L.async(function()
    local a, b, aerr, berr = L.pair(opts("linux-rc", "tbrt"), opts("linux-rc", "llama-linux"))
    assert.is_nil(a) ; assert.is_nil(b)
    assert.matches("^EPROTO: link %d+: activate: the peer's caps carry psn = qpn & 0xffffff.-: " ..
      speaks("llama-linux"), aerr)
    assert.matches("^EPROTO: link %d+: activate: the peer's caps carry a psn that is not " ..
      "qpn & 0xffffff.-: " .. speaks("tbrt"), berr)
  end))
end)

-- The llama.cpp-like peer of llama_wire_spec.lua, against tbrt in its own
-- framing: the case of the bug report (llama.cpp took tbrt's frames).
describe("a llama.cpp-like Apple peer against tbrt framing", function()
  local function peer(role, port)
    local o = cjson.encode({ device = "soft0", personality = "apple-uc", timeout = 10 })
    local args = { role, "apple", port or 0, o }
    if role == "client" then args[#args + 1] = 100 end
    return L.spawn_peer(args, nil, "llama_peer.lua")
  end
  local function link_opts()
    return opts("apple-uc", "tbrt", { exchange = ggml_rpc.hello_exchange() })
  end

  it("tbrt, receiving its first command, names llama-apple; the peer sees its link end",
    L.async(function()
      local srv = assert(tbrt.listen("127.0.0.1", 0, link_opts()))
      local p = peer("client", srv.port)
      local l = assert(srv:accept(20))
      srv:close()
      local name, err = ggml_rpc.new():recv_command(l, 10)
      assert.is_nil(name)
      assert.matches("^EPROTO: link %d+: recv: a frame with llama.cpp's RSEG magic: " ..
        speaks("llama-apple") .. " %(this link speaks tbrt framing%)", err)
      local r = p:wait(10)
      assert.equal(1, r.code)
      assert.matches("llama_peer: reply to 100: peer gone", r.stderr)
      l:close()
    end))

  it("the peer refuses tbrt's frames (bad magic), no longer taking them for payload; tbrt " ..
    "hears of it within the liveness bound", L.async(function()
    local p = peer("server")
    assert(p:expect("listening", 20))
    local port = tonumber(p:stdout():match("listening (%d+)"))
    local l = assert(tbrt.connect("127.0.0.1", port, link_opts()))
    local rpc = ggml_rpc.new()
    assert(rpc:send_command(l, 10, string.rep("x", 100)))
    local t0 = tbrt.now()
    local reply, err = rpc:recv_reply(l, 100, 10)
    local dt = tbrt.now() - t0
    assert.is_nil(reply)
    assert.matches("^ECONNRESET: link %d+: peer closed the bootstrap socket without saying " ..
      "goodbye %(peer process died%?%) after our first frames.- if the peer is llama.cpp, it " ..
      "speaks llama%-apple framing %(8%-byte RSEG header%); open the link with framing = " ..
      "'llama%-apple'", err)
    assert.is_true(dt < LIVENESS + 1, "noticed after " .. dt .. " s")
    local r = p:wait(10)
    assert.equal(1, r.code)
    assert.matches("llama_peer: RDMA%(Apple%) bad frame magic 0x54524254", r.stderr)
    l:close()
  end))
end)

describe("a llama.cpp-like Linux peer against tbrt framing", function()
  it("tbrt fails at activation, naming llama-linux", L.async(function()
    local o = cjson.encode({ device = "soft0", personality = "linux-rc", timeout = 5 })
    local p = L.spawn_peer({ "server", "linux", 0, o }, nil, "llama_peer.lua")
    assert(p:expect("listening", 20))
    local port = tonumber(p:stdout():match("listening (%d+)"))
    local l, err = tbrt.connect("127.0.0.1", port,
      opts("linux-rc", "tbrt", { exchange = ggml_rpc.hello_exchange() }))
    assert.is_nil(l)
    assert.matches("^EPROTO: link %d+: activate: the peer's caps carry psn = qpn & 0xffffff.-: " ..
      speaks("llama-linux"), err)
    p:wait(10)
  end))
end)

-- Past the psn rule (a raw RC queue pair of this process stands in for the
-- peer, its caps made to pass it), what is checked is the data itself.
describe("a SEND in the other framing, past the setup checks (soft linux-rc)", function()
  local bit = require("bit")
  local ffi = require("ffi")
  local caps = require("tbrt.caps")
  local verbs = require("tbrt.verbs")
  local V = require("verbs_helpers")

  local function raw_peer(llama_psn)
    local r = { dev = assert(verbs.open("soft0", { personality = "linux-rc" })) }
    r.pd = assert(r.dev:pd())
    r.cq = assert(r.dev:cq(64))
    r.qp = assert(r.pd:qp { type = "RC", send_cq = r.cq, recv_cq = r.cq, send_wr = 16, recv_wr = 16 })
    r.buf = ffi.new("uint8_t[4096]")
    r.mr = assert(r.pd:reg(r.buf, 4096))
    local own = bit.band(r.qp.num, 0xffffff)
    r.psn = llama_psn and own or bit.bxor(own, 5)
    r.caps = assert(caps.encode { flavor = "linux", qpn = r.qp.num, psn = r.psn, gid = V.LOOPBACK })
    function r:connect(peer_caps)
      local c = assert(caps.decode(peer_caps, "linux"))
      assert(self.qp:modify { state = "INIT", port = 1, pkey_index = 0, access = verbs.ACCESS_ALL })
      assert(self.qp:modify { state = "RTR", mtu = 1024, dest_qpn = c.qpn, rq_psn = c.psn,
        dgid = c.gid, sgid_index = V.loopback_gid(self.dev, 1), ah_port = 1, min_rnr_timer = 1,
        max_dest_rd_atomic = 1 })
      assert(self.qp:modify { state = "RTS", sq_psn = self.psn, timeout = 14, retry_cnt = 7,
        rnr_retry = 7, max_rd_atomic = 1 })
    end
    function r:send(bytes)
      ffi.copy(self.buf, bytes, #bytes)
      assert(self.qp:post_send { mr = self.mr, len = #bytes, wr_id = 1 })
    end
    function r:close()
      self.qp:destroy() self.mr:dereg() self.cq:destroy() self.pd:free() self.dev:close()
    end
    return r
  end

  -- a link to the raw peer; its bootstrap socket's other end is returned
  local function link_to(raw, framing, on_accept)
    local srv = assert(tbrt.tcp_listen("127.0.0.1", 0))
    local t = task.spawn(function()
      local s = assert(srv:accept(5))
      if on_accept then on_accept(s) end
      return s
    end)
    local mine
    local l, err = tbrt.connect("127.0.0.1", srv.port, opts("linux-rc", framing, {
      exchange = function(_, my_caps) mine = my_caps return raw.caps end }))
    local s = assert(t:join(5))
    srv:close()
    assert(l, err)
    raw:connect(mine)
    return l, s
  end

  it("llama-linux names tbrt on a SEND that starts with a TBRT header, and tells the peer",
    L.async(function()
      local raw = raw_peer(true)
      local l, s = link_to(raw, "llama-linux")
      local magic, len, seq = 0x54524254, 5, 1
      local hdr = ffi.new("uint32_t[4]", magic, len, seq, bit.bnot(bit.bxor(magic, len, seq)))
      raw:send(ffi.string(hdr, 16) .. "hello")
      local data, err = l:recv(5, 5)
      assert.is_nil(data)
      assert.matches("^EPROTO: link %d+: recv: a SEND that starts with tbrt's TBRT header: " ..
        speaks("tbrt") .. " %(this link speaks llama%-linux framing%)$", err)
      assert.equal("L", s:recv(1, 5), "the notice byte names llama-linux")
      l:close() s:close() raw:close()
    end))

  it("tbrt points at llama-linux when a frame has no TBRT header", L.async(function()
    local raw = raw_peer(false)
    local l, s = link_to(raw, "tbrt", function(sock) sock:send("\42") end)
    raw:send("\10")                 -- a ggml-rpc command byte, as llama.cpp's Linux end sends it
    local data, err = l:recv(1, 5)
    assert.is_nil(data)
    assert.matches("^EPROTO: link %d+: recv: a SEND of 1 bytes, shorter than the 16%-byte " ..
      "frame header %(a peer in llama%-linux framing, which sends no header%? open the link " ..
      "with framing = 'llama%-linux' if so%)$", err)
    l:close() s:close() raw:close()
  end))
end)
