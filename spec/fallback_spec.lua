-- fallback_spec.lua - an RDMA link whose peer sent all-zero caps stays on
-- TCP, says so in its info ("peer has no RDMA: staying on TCP") and works;
-- when the tcp link it would stay on cannot be set up, activation fails with
-- the reason and the peer fails with it (it gets 0x00, not 0x2A), instead of
-- carrying on with no transport.
local tbrt = require("tbrt")
local task = require("tbrt.task")

local C = require("tbrt.ffi").C

-- Two probed links on a fresh socket pair: a over `da`, b over `db`.
local function probed(da, db)
  local srv = assert(tbrt.tcp_listen("127.0.0.1", 0))
  local t = task.spawn(function() return srv:accept(5) end)
  local s1 = assert(tbrt.tcp_connect("127.0.0.1", srv.port, 5))
  local s2 = assert(t:join(5))
  srv:close()
  return assert(tbrt.probe(s1, { device = da, fallback = false })),
         assert(tbrt.probe(s2, { device = db, fallback = false }))
end

local function activate_both(a, b)
  local ta = task.spawn(function() return a:activate(b:caps(), 5) end)
  local tb = task.spawn(function() return b:activate(a:caps(), 5) end)
  local oka, erra = ta:join(10)
  local okb, errb = tb:join(10)
  return oka, erra, okb, errb
end

describe("an RDMA link whose peer has no RDMA", function()
  it("stays on TCP, says so in its info, and carries data", function()
    task.run(function()
      local a, b = probed("soft", "tcp")
      assert.equal("soft", a:info().kind)
      assert.equal("", a:info().fallback)
      assert(activate_both(a, b))
      local i = a:info()
      assert.equal("tcp", i.kind)
      assert.equal("peer has no RDMA: staying on TCP", i.fallback)
      assert.matches("all%-zero caps", i.why_device)
      assert.equal("", b:info().fallback, "the tcp end asked for tcp")
      assert(a:send("over tcp")) ; assert(a:flush())
      assert.equal("over tcp", assert(b:recv(8, 5)))
      assert(a:close()) ; assert(b:close())
    end)
  end)

  it("fails both ends with the reason when the tcp link cannot be set up", function()
    task.run(function()
      local a, b = probed("soft", "tcp")
      assert.equal(0, C.tbrt_link_inject(a._l, 5))        -- the fallback's setup fails
      local oka, erra, okb, errb = activate_both(a, b)
      assert.is_nil(oka)
      assert.matches("^ENOMEM: link %d+: activate: the peer has no RDMA, and the tcp link to stay " ..
        "on cannot be set up: tcp setup: out of memory %(injected%)$", erra)
      assert.equal("broken", a:info().state)
      assert.is_nil(okb)
      assert.matches("^ECONNREFUSED: link %d+: readiness: the peer failed to activate its side", errb)
      -- a broken link without a transport still answers and closes cleanly
      assert.is_nil(a:recv(1, 0.1))
      assert.equal(0, C.tbrt_link_inflight(a._l))
      a:close() ; b:close()
    end)
  end)
end)
