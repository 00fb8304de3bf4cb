-- llama_wire_spec.lua - tbrt as either end of a llama.cpp ggml-rpc link.
-- The other end is a spec-only peer (spec/support/llama_peer.lua over
-- llama_wire.lua) written from the facts of llama.cpp's two RDMA transports,
-- with its own HELLO; tbrt runs framing llama-apple / llama-linux with the
-- HELLO of tbrt.ggml_rpc as the caps exchange. Both roles, 1 B .. 16 MiB
-- (around the 8-byte header, the 131064-byte stride payload, the 256-byte
-- inline limit and the 256 KiB chunk), every byte checked on both sides.
local ffi = require("ffi")
local cjson = require("cjson")
local tbrt = require("tbrt")
local ggml_rpc = require("tbrt.ggml_rpc")
local L = require("links")

local SIZES = { 1, 8, 9, 255, 256, 257, 4096, 131063, 131064, 131065, 262143, 262144, 262145,
  1048577, 16777216 }
local CMD = 10                  -- GRAPH_COMPUTE: any command the protocol knows

local CASES = {
  { wire = "apple", framing = "llama-apple", personality = "apple-uc", qp = "UC", port = 2,
    nbuf = 16, stride = 131072 },
  { wire = "linux", framing = "llama-linux", personality = "linux-rc", qp = "RC", port = 1,
    nbuf = 24, stride = 262144 },
}

local function pattern(n) return ffi.string(L.pattern(n, n % 251), n) end

local function check(s, n)
  assert.equal(n, #s)
  local p = ffi.cast("const uint8_t *", s)
  assert.is_nil(L.check(p, n, n % 251), "payload of " .. n .. " bytes")
end

local function peer(role, c, port)
  local opts = cjson.encode({ device = "soft0", personality = c.personality, cmd = CMD,
    timeout = 30 })
  local args = { role, c.wire, port or 0, opts }
  if role == "client" then for _, n in ipairs(SIZES) do args[#args + 1] = n end end
  return L.spawn_peer(args, nil, "llama_peer.lua")
end

local function link_opts(c, rpc)
  return { device = "soft", personality = c.personality, framing = c.framing, fallback = false,
    timeout = 30, exchange = rpc:hello_exchange() }
end

local function check_info(l, c)
  local i = l:info()
  assert.same({ c.framing, c.qp, c.port, c.nbuf, c.stride },
    { i.framing, i.qp_type, i.port, i.nbuf, i.stride })
end

for _, c in ipairs(CASES) do
  describe("llama.cpp's " .. c.wire .. " transport", function()
    it("tbrt serves a llama.cpp-like client: HELLO, then commands of 1 B .. 16 MiB echoed",
      L.async(function()
        local rpc = ggml_rpc.new()
        local srv = assert(tbrt.listen("127.0.0.1", 0, link_opts(c, rpc)))
        local p = peer("client", c, srv.port)
        local l, err = srv:accept(30)
        srv:close()
        assert(l, err)
        check_info(l, c)
        for _, n in ipairs(SIZES) do
          local name, payload, num = rpc:recv_command(l, 30)
          assert(name, payload)
          assert.same({ "GRAPH_COMPUTE", CMD }, { name, num })
          check(payload, n)
          assert(rpc:send_reply(l, payload, nil, 30))
        end
        local r = p:wait(60)
        assert.equal(0, r.code, r.stderr)
        assert.matches("transport RDMA", r.stdout)
        for _, n in ipairs(SIZES) do assert.matches("\nok " .. n .. "\n", r.stdout) end
        if c.wire == "linux" then
          -- the 1-byte command and 8-byte sizes go inline, as llama.cpp sends them
          assert.is_true(l:stats().inline_sends >= #SIZES, "inline sends")
          assert.matches("inline 256", r.stdout)
        end
        -- llama.cpp ends a session by closing the socket: that reads as EOF here
        local data, eerr = l:recv(1, 5)
        assert.is_nil(data)
        assert.matches("^EOF: link %d+: the peer closed the link", eerr)
        assert(l:close())
      end))

    it("tbrt is the client of a llama.cpp-like server: HELLO, then 1 B .. 16 MiB both ways",
      L.async(function()
        local rpc = ggml_rpc.new()
        local p = peer("server", c)
        assert(p:expect("listening", 20), "the peer listens")
        local port = tonumber(p:stdout():match("listening (%d+)"))
        local l = assert(tbrt.connect("127.0.0.1", port, link_opts(c, rpc)))
        check_info(l, c)
        for _, n in ipairs(SIZES) do
          local reply = assert(rpc:call(l, CMD, pattern(n), n, 30))
          check(reply, n)
        end
        assert(l:close())
        local r = p:wait(30)
        assert.equal(0, r.code, r.stderr)
        for _, n in ipairs(SIZES) do assert.matches("\nserved " .. n .. "\n", r.stdout) end
        assert.matches("\ndone", r.stdout)
      end))
  end)
end

describe("llama framings between two tbrt links", function()
  for _, c in ipairs {
    { framing = "llama-apple", device = "mlx5", qp = "RC", inline = false },
    { framing = "llama-linux", device = "mlx5", qp = "RC", inline = false },
    { framing = "llama-apple", device = "soft", personality = "linux-rc", qp = "RC", inline = false },
  } do
    it(string.format("carry 1 B .. 16 MiB over %s%s in %s framing", c.device,
      c.personality and (" " .. c.personality) or "", c.framing), L.async(function()
      local a, b, ea, eb = L.pair({ device = c.device, personality = c.personality,
        framing = c.framing, fallback = false, timeout = 30 })
      assert(a and b, tostring(ea or eb))
      assert.equal(c.qp, a:info().qp_type)
      for _, n in ipairs(SIZES) do
        local src, dst = L.pattern(n, n % 251), ffi.new("uint8_t[?]", n)
        local t = tbrt.spawn(function() assert(a:send(src, n)) return assert(a:flush()) end)
        assert.equal(n, b:recv_into(dst, n, 30))
        assert(t:join(30))
        assert.is_nil(L.check(dst, n, n % 251), "size " .. n)
      end
      -- llama-apple never posts inline, and mlx5 grants llama-linux no inline data
      assert.equal(0, a:stats().inline_sends)
      a:close() b:close()
    end))
  end
end)

-- The ibverbs device over tbrt's own libibverbs and Apple librdma (the
-- soft device behind the verbs API), Linux-like and Apple-like, two processes.
describe("llama framings over the ibverbs device (tbrt's verbs libraries)", function()
  local H = require("helpers")
  local task = require("tbrt.task")
  local CHILD = H.root .. "/spec/support/ibverbs/child.lua"
  for _, c in ipairs {
    { lib = "verbs/libibverbs.so.1", framing = "llama-linux", qp = "RC" },
    { lib = "apple/librdma.so", framing = "llama-apple", qp = "UC" },
  } do
    it("runs a " .. c.framing .. " link between two processes over " .. c.lib, function()
      local dir = H.tmpdir()
      local env = { TBRT_IBVERBS_LIB = H.build .. "/lib/tbrt/" .. c.lib, TBRT_SHIM_FRAMING = c.framing,
        TBRT_VERBS_DEVICES = false, TBRT_VERBS_PERSONALITY = false, TBRT_VERBS_FAIL = false,
        TBRT_DEVICE = false }
      local function child(role)
        local r = H.run_tbrt({ CHILD, role, dir .. "/port" }, { env = env, timeout = 30 })
        assert(r.code == 0 and not r.timed_out, H.describe(r))
        local json = r.stdout:match("RESULT (%b{})")
        assert(json, H.describe(r))
        return cjson.decode(json)
      end
      local server, client
      task.run(function()
        local ts = task.spawn(child, "serve")
        local tc = task.spawn(child, "connect")
        server, client = ts:join(40), tc:join(40)
      end)
      H.rmtree(dir)
      -- both ends reported (a child that failed joins as nil)
      assert.is_table(server, "the serving child reported nothing")
      assert.is_table(client, "the connecting child reported nothing")
      for _, res in ipairs { server, client } do
        assert.equal("ok", res.received)
        assert.same({ "ibverbs", c.framing, c.qp }, { res.info.kind, res.info.framing,
          res.info.qp_type })
      end
    end)
  end
end)
