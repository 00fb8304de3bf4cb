-- debug_spec.lua - TBRT_DEBUG=0..3 as users know GGML_RPC_DEBUG: nothing at
-- 0; events at 1 (probed, ready, staying on TCP once, closed); every
-- operation at 2; every frame with byte counts and times at 3; each line
-- "tbrt: link N: ..." on stderr; the level changeable at run time, and a C
-- function the Lua side logs through.
local H = require("helpers")

-- A child that sets up a pair over `device_a` / `device_b`, sends "hello"
-- one way, logs a line of its own through tbrt_debug_log, closes.
local SCRIPT = [[
local tbrt = require("tbrt")
local C = require("tbrt.ffi").C
local da, db = os.getenv("DEV_A"), os.getenv("DEV_B")
tbrt.run(function()
  local srv = assert(tbrt.listen("127.0.0.1", 0, { device = db }))
  local t = tbrt.spawn(function() return srv:accept(10) end)
  local a = assert(tbrt.connect("127.0.0.1", srv.port, { device = da }))
  local b = assert(t:join(10))
  srv:close()
  assert(a:send("hello")) ; assert(a:flush())
  assert(b:recv(5, 5) == "hello")
  C.tbrt_debug_log(1, a.id, "from lua: level " .. C.tbrt_debug_level())
  C.tbrt_debug_log(3, 0, "a frame-level line of no link")
  a:close() ; b:close()
end)
]]

local function run(level, da, db)
  local r = H.run_tbrt({ "-e", SCRIPT },
    { env = { TBRT_DEBUG = level, DEV_A = da or "soft", DEV_B = db or da or "soft" } })
  assert(r.code == 0, H.describe(r))
  return r.stderr
end

local function count(text, pattern)
  local n = 0
  for _ in text:gmatch(pattern) do n = n + 1 end
  return n
end

describe("TBRT_DEBUG", function()
  it("0 (and unset) prints nothing", function()
    assert.equal("", run("0"))
    assert.equal("", run(false))
  end)

  it("1 prints the events of each link, prefixed so they grep", function()
    local e = run("1")
    for line in e:gmatch("[^\n]+") do assert.matches("^tbrt: ", line) end
    assert.equal(2, count(e, "tbrt: link %d+: probed: soft0 apple%-uc port 2"))
    assert.equal(2, count(e, "tbrt: link %d+: ready: soft0 qpn %d+ <%-> peer qpn %d+, UC, fixed framing"))
    assert.equal(2, count(e, "tbrt: link %d+: closed: "))
    assert.matches("tbrt: link %d+: from lua: level 1\n", e)
    assert.is_nil(e:find("send:", 1, true), "operations are level 2")
    assert.is_nil(e:find("frame out", 1, true), "frames are level 3")
  end)

  it("1 says once that a peer without RDMA keeps both on TCP", function()
    local e = run("1", "soft", "tcp")
    assert.equal(1, count(e, "tbrt: link %d+: peer has no RDMA: staying on TCP\n"))
    assert.equal(2, count(e, "tbrt: link %d+: ready: tcp"))
  end)

  it("2 adds every operation that moved bytes and each blocking call", function()
    local e = run("2")
    assert.matches("tbrt: link %d+: send: 5 of 5 bytes accepted\n", e)
    assert.matches("tbrt: link %d+: flush: 5 bytes posted\n", e)
    assert.matches("tbrt: link %d+: recv: 5 bytes", e)
    assert.is_nil(e:find("frame out", 1, true))
    assert.is_nil(e:find("a frame-level line", 1, true))
  end)

  it("3 adds every frame with its bytes and times, on RDMA and tcp links", function()
    local e = run("3")
    assert.matches("tbrt: link %d+: frame out: stride 0 seq 1, 5 payload bytes, 131072 on the wire " ..
      "%(t=%d+%.%d+ s, %+%d+%.%d us%)\n", e)
    assert.matches("tbrt: link %d+: frame in: stride 0 seq 1, 5 payload bytes, 131072 on the wire", e)
    assert.matches("tbrt: link %d+: frame sent: stride 0 completed", e)
    assert.matches("tbrt: a frame%-level line of no link\n", e)
    local t = run("3", "tcp")
    assert.matches("tbrt: link %d+: tcp write: 5 of 5 bytes %(t=%d+%.%d+ s", t)
    assert.matches("tbrt: link %d+: tcp read: 5 of 5 bytes", t)
  end)

  it("3 shows eager frames written and taken, by slot and seq (linux-rc)", function()
    -- round trips: each end learns the other's slots when it first polls
    local r = H.run_tbrt({ "-e", [[
local tbrt = require("tbrt")
tbrt.run(function()
  local srv = assert(tbrt.listen("127.0.0.1", 0, { device = "soft1" }))
  local t = tbrt.spawn(function() return srv:accept(10) end)
  local a = assert(tbrt.connect("127.0.0.1", srv.port, { device = "soft1" }))
  local b = assert(t:join(10))
  srv:close()
  for _ = 1, 3 do
    assert(a:send("ping")) ; assert(a:flush()) ; assert(b:recv(4, 5) == "ping")
    assert(b:send("pong")) ; assert(b:flush()) ; assert(a:recv(4, 5) == "pong")
  end
  a:close() ; b:close()
end)
]] }, { env = { TBRT_DEBUG = "3" } })
    assert(r.code == 0, H.describe(r))
    assert.matches("tbrt: link %d+: frame out eager: slot 0 seq %d+, 4 payload bytes, 32 on the " ..
      "wire %(t=%d+%.%d+ s%)\n", r.stderr)
    assert.matches("tbrt: link %d+: frame in eager: slot 0 seq %d+, 4 payload bytes", r.stderr)
  end)

  it("changes at run time and clamps", function()
    local C = require("tbrt.ffi").C
    local old = C.tbrt_debug_set(2)
    assert.equal(2, C.tbrt_debug_level())
    assert.equal(2, C.tbrt_debug_set(9))
    assert.equal(3, C.tbrt_debug_level())
    C.tbrt_debug_set(-1)
    assert.equal(0, C.tbrt_debug_level())
    C.tbrt_debug_set(old)
  end)
end)
