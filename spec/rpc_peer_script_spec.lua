-- rpc_peer_script_spec.lua - scripts/rpc_peer.lua end to end: its server
-- (HELLO, then an echo of every command) and its client (HELLO, then a
-- scripted command sequence) against each other in both llama framings,
-- the client against the llama.cpp-like server of spec/support, a --script
-- file, and the options it must refuse (an unknown fault, by name); and
-- pair.lua --framing.
local cjson = require("cjson")
local H = require("helpers")
local L = require("links")

local SCRIPT = H.root .. "/scripts/rpc_peer.lua"

local function client(args)
  local full = { SCRIPT }
  for _, a in ipairs(args) do full[#full + 1] = a end
  return H.run(H.tbrt, full, { timeout = 60 })
end

local function server(args)
  local full = { "--listen", "127.0.0.1:0" }
  for _, a in ipairs(args) do full[#full + 1] = a end
  local p = L.spawn_peer(full, nil, SCRIPT)
  assert(p:expect("listening on", 20), "the server listens")
  return p, p:stdout():match("listening on 127%.0%.0%.1:(%d+)")
end

describe("scripts/rpc_peer.lua", function()
  for _, c in ipairs {
    { personality = "apple-uc", framing = "llama-apple", qp = "UC" },
    { personality = "linux-rc", framing = "llama-linux", qp = "RC" },
  } do
    it("serves its own client in " .. c.framing .. " framing: HELLO, then echoes", L.async(function()
      local p, port = server({ "--personality", c.personality })
      local r = client({ "--connect", "127.0.0.1:" .. port, "--personality", c.personality,
        "--commands", "GRAPH_COMPUTE:1,SET_TENSOR:300K,DEVICE_COUNT:0,GRAPH_COMPUTE:16M" })
      assert.equal(0, r.code, r.stderr)
      assert.matches("hello: server speaks ggml%-rpc 7%.0%.1", r.stdout)
      assert.matches(c.framing:gsub("%-", "%%-") .. " framing, " .. c.qp, r.stdout)
      for _, line in ipairs { "GRAPH_COMPUTE 1 B: echo ok", "SET_TENSOR 307200 B: echo ok",
        "DEVICE_COUNT 0 B: echo ok", "GRAPH_COMPUTE 16777216 B: echo ok" } do
        assert.matches(line, r.stdout, 1, true)
      end
      local s = p:wait(20)
      assert.equal(0, s.code, s.stderr)
      assert.matches("served 4 commands, 17084417 bytes", s.stdout, 1, true)
    end))
  end

  it("is the client of a llama.cpp-like server (llama-linux)", L.async(function()
    local p = L.spawn_peer({ "server", "linux", 0, cjson.encode({ device = "soft0",
      personality = "linux-rc", timeout = 20 }) }, nil, "llama_peer.lua")
    assert(p:expect("listening", 20))
    local port = p:stdout():match("listening (%d+)")
    -- the peer checks the pattern keyed by size: sizes stand alone
    local r = client({ "--connect", "127.0.0.1:" .. port, "--personality", "linux-rc",
      "--script", H.root .. "/spec/support/rpc_script.lua" })
    assert.equal(0, r.code, r.stderr)
    assert.matches("GRAPH_COMPUTE 262145 B: echo ok", r.stdout, 1, true)
    assert.matches("GRAPH_COMPUTE 4096 B: 4096%-byte reply", r.stdout)
    local s = p:wait(20)
    assert.equal(0, s.code, s.stderr)
    assert.matches("served 262145", s.stdout, 1, true)
  end))

  it("takes --faults for the device and refuses an unknown fault by name", function()
    local r = client({ "--connect", "127.0.0.1:1", "--faults", "loss=1%" })
    assert.equal(1, r.code)
    assert.matches('rpc_peer.lua: %-%-faults: .*"loss=1%%" is not a known fault=value', r.stderr)
    r = client({ "--connect", "127.0.0.1:1", "--faults", "drop=1%,seed=3" })
    assert.equal(1, r.code)
    assert.not_matches("%-%-faults", r.stderr)    -- accepted: the connection is what fails
  end)

  it("refuses unknown commands and replies before connecting", function()
    local r = client({ "--connect", "127.0.0.1:1", "--commands", "FROBNICATE:4" })
    assert.equal(1, r.code)
    assert.matches("rpc_peer.lua: command 1: ggml_rpc: unknown command FROBNICATE", r.stderr, 1, true)
    r = client({ "--connect", "127.0.0.1:1", "--commands", "SET_TENSOR:4:maybe" })
    assert.equal(1, r.code)
    assert.matches("command 1: reply must be echo, none or a size", r.stderr, 1, true)
    r = client({ "--connect", "127.0.0.1:1", "--framing", "udp" })
    assert.equal(1, r.code)
    assert.matches("--framing must be tbrt, llama-apple or llama-linux, got udp", r.stderr, 1, true)
  end)
end)

describe("scripts/pair.lua --framing", function()
  it("runs both ends in a llama framing", function()
    local r = H.run(H.tbrt, { H.root .. "/scripts/pair.lua", "--framing", "llama-linux",
      "--personality", "linux-rc", "--sizes", "1,300K", "--iters", "5" }, { timeout = 60 })
    assert.equal(0, r.code, r.stderr)
    assert.matches("link: soft0 linux%-rc port 1 .*llama%-linux framing, RC, 24 x 262144 B strides",
      r.stdout)
    assert.matches("\n%s+300 KiB%s+5%s", r.stdout)
  end)
end)
