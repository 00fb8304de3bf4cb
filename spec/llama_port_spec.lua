-- llama_port_spec.lua - llama-linux framing uses port 1, whatever its state,
-- as llama.cpp's Linux transport hard-codes it. Against a device whose port
-- 1 is DOWN (the soft apple-uc personality: port 1 DOWN, port 2 ACTIVE) it
-- fails the way llama.cpp does: a DOWN port keeps no GID equal to the
-- socket's address, so the probe finds none, the caps go out all zero and
-- both ends stay on TCP (or, with fallback = false, the probe fails naming
-- port 1). A port 1 that goes DOWN under a live link breaks it within the
-- liveness bound.
local cjson = require("cjson")
local ffi = require("ffi")
local tbrt = require("tbrt")
local task = require("tbrt.task")
local verbs = require("tbrt.verbs")
local ggml_rpc = require("tbrt.ggml_rpc")
local L = require("links")

local function pattern(n) return ffi.string(L.pattern(n, n % 251), n) end

describe("llama-linux framing and port 1", function()
  it("refuses a device whose port 1 is DOWN, naming port 1, with fallback = false",
    L.async(function()
      local a, b, aerr, berr = L.pair({ device = "soft0", personality = "apple-uc",
        framing = "llama-linux", fallback = false })
      assert.is_nil(a) ; assert.is_nil(b)
      for _, err in ipairs { aerr, berr } do
        assert.matches("^ENODEV: link %d+: probe: no usable RDMA device: soft0: port 1 " ..
          "is DOWN, but llama%-linux framing uses it anyway, as llama.cpp's Linux transport " ..
          "hard%-codes port 1; port 1: no GID equals ::ffff:127%.0%.0%.1", err)
      end
    end))

  it("stays on TCP with a llama.cpp-like peer, as llama.cpp does, when tbrt's port 1 is DOWN",
    L.async(function()
      local rpc = ggml_rpc.new()
      local srv = assert(tbrt.listen("127.0.0.1", 0, { device = "soft0", personality = "apple-uc",
        framing = "llama-linux", exchange = rpc:hello_exchange() }))
      local p = L.spawn_peer({ "client", "linux", srv.port, cjson.encode({ device = "soft1",
        personality = "linux-rc", timeout = 20 }), 1, 300000 }, nil, "llama_peer.lua")
      local l = assert(srv:accept(20))
      srv:close()
      assert.equal("tcp", l:info().kind)
      assert.matches("port 1 is DOWN", l.fallback_why)
      for _, n in ipairs { 1, 300000 } do
        local _, payload = assert(rpc:recv_command(l, 10))
        assert.equal(pattern(n), payload)
        assert(rpc:send_reply(l, payload))
      end
      local r = p:wait(20)
      assert.equal(0, r.code, r.stderr)
      assert.matches("transport TCP", r.stdout, "the peer got all-zero caps and stayed on TCP")
      l:close()
    end))

  it("and so does the llama.cpp-like peer when its own port 1 is DOWN", L.async(function()
    local rpc = ggml_rpc.new()
    local p = L.spawn_peer({ "server", "linux", 0, cjson.encode({ device = "soft0",
      personality = "apple-uc", timeout = 20 }) }, nil, "llama_peer.lua")
    assert(p:expect("listening", 20))
    local port = tonumber(p:stdout():match("listening (%d+)"))
    local l = assert(tbrt.connect("127.0.0.1", port, { device = "soft1", personality = "linux-rc",
      framing = "llama-linux", exchange = rpc:hello_exchange() }))
    assert.equal("tcp", l:info().kind, "the peer's caps were all zero")
    assert.equal(pattern(4096), rpc:call(l, 10, pattern(4096), 4096, 10))
    l:close()
    local r = p:wait(20)
    assert.equal(0, r.code, r.stderr)
    assert.matches("transport TCP", r.stdout)
  end))

  it("breaks a live link with ENETDOWN within the bound when port 1 goes DOWN",
    L.async(function()
      local a, b = L.pair({ device = "soft", personality = "linux-rc", framing = "llama-linux",
        fallback = false, liveness = 1 })
      assert.equal(1, a:info().port)
      local dev = assert(verbs.open("soft0", { personality = "linux-rc" }))
      local r = task.spawn(function() return select(2, b:recv(4, 10)) end)
      task.sleep(0.05)
      local t0 = tbrt.now()
      assert(dev:set_port(1, "down"))
      local err = r:join(5)
      local dt = tbrt.now() - t0
      dev:set_port(1, nil)
      dev:close()
      assert.matches("^ENETDOWN: link %d+: port 1 of soft0 went DOWN", err)
      assert.is_true(dt < 1, "noticed after " .. dt .. " s")
      a:close() b:close()
    end))
end)
