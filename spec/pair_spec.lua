-- pair_spec.lua - links between two processes: every size from 1 B to
-- 16 MiB, both ways, every byte checked, over soft (both personalities) and
-- tcp; a peer killed with SIGKILL mid-transfer is reported within the
-- liveness bound; close tears down in the order hardware needs.
local ffi = require("ffi")
local cjson = require("cjson")
local tbrt = require("tbrt")
local L = require("links")

local SIZES = {}
do
  local n = 1
  while n <= 16 * 1024 * 1024 do SIZES[#SIZES + 1] = n; n = n * 4 end
  SIZES[#SIZES + 1] = 128 * 1024 - 16 + 1      -- one byte over a stride's payload
  SIZES[#SIZES + 1] = 16 * 1024 * 1024 - 1
end

local CASES = {
  { name = "soft apple-uc", opts = { device = "soft", personality = "apple-uc" }, kind = "soft" },
  { name = "soft linux-rc", opts = { device = "soft", personality = "linux-rc" }, kind = "soft" },
  { name = "tcp", opts = { device = "tcp" }, kind = "tcp" },
}

for _, case in ipairs(CASES) do
  describe("two processes over " .. case.name, function()
    it("move 1 B .. 16 MiB both ways with every byte checked", L.async(function()
      local srv = assert(tbrt.listen("127.0.0.1", 0, case.opts))
      local args = { "echo", srv.port, cjson.encode(case.opts) }
      for _, n in ipairs(SIZES) do args[#args + 1] = n end
      local peer = L.spawn_peer(args)
      local l = assert(srv:accept(20))
      srv:close()
      assert.equal(case.kind, l:info().kind)
      local back = ffi.new("uint8_t[?]", 16 * 1024 * 1024)
      for _, n in ipairs(SIZES) do
        local buf = L.pattern(n, n % 251)
        assert(l:send(buf, n)) ; assert(l:flush())
        local got, err = l:recv_into(back, n, 30)
        if not got then
          local r = peer:wait(5)
          error(string.format("%s\n(peer: exit %s, signal %s, stderr: %s)", err, tostring(r.code),
            tostring(r.signal), r.stderr), 0)
        end
        assert.equal(n, got)
        assert.is_nil(L.check(back, n, n % 251), "echo of " .. n .. " bytes")
      end
      local r = peer:wait(30)
      assert.equal(0, r.code, r.stderr)
      assert.matches("ok", r.stdout)
      assert(l:close())
    end))

    it("reports a peer killed mid-transfer (sending to it) within the liveness bound", L.async(function()
      local srv = assert(tbrt.listen("127.0.0.1", 0, case.opts))
      local peer = L.spawn_peer({ "sink", srv.port, cjson.encode(case.opts) })
      local l = assert(srv:accept(20))
      srv:close()
      assert(peer:expect("ready", 10))
      local buf = L.pattern(2 ^ 20)
      for _ = 1, 4 do assert(l:send(buf, 2 ^ 20)) ; assert(l:flush()) end
      peer:kill("sigkill")
      local t0 = tbrt.now()
      local err
      for _ = 1, 10000 do
        local ok, e = l:send(buf, 2 ^ 20, 5)
        if ok then ok, e = l:flush() end
        if not ok then err = e break end
      end
      local dt = tbrt.now() - t0
      assert.is_string(err, "sending to a dead peer must fail")
      assert.is_true(dt < 2.0, "noticed after " .. dt .. " s")
      assert.matches("^E[A-Z]+: link %d+: ", err)
      if case.kind ~= "tcp" then
        assert.matches("peer closed the bootstrap socket without saying goodbye %(peer process died%?%)", err)
      end
      peer:wait(5)
      l:close()
    end))

    it("reports a peer killed mid-transfer to a waiting recv within the liveness bound", L.async(function()
      local srv = assert(tbrt.listen("127.0.0.1", 0, case.opts))
      local peer = L.spawn_peer({ "source", srv.port, cjson.encode(case.opts) })
      local l = assert(srv:accept(20))
      srv:close()
      assert(peer:expect("ready", 10))
      local buf = ffi.new("uint8_t[?]", 2 ^ 20)
      assert(l:recv_into(buf, 2 ^ 20, 10))
      peer:kill("sigkill")
      local t0 = tbrt.now()
      local err
      for _ = 1, 100000 do
        local got, e = l:recv_into(buf, 2 ^ 20, 5)
        if not got then err = e break end
      end
      local dt = tbrt.now() - t0
      assert.is_true(dt < 2.0, "noticed after " .. dt .. " s")
      if case.kind == "tcp" then
        assert.matches("^EOF: link %d+: the peer closed the link", err)
      else
        assert.matches("^ECONNRESET: link %d+: peer closed the bootstrap socket without saying goodbye", err)
      end
      peer:wait(5)
      l:close()
    end))
  end)
end

describe("teardown", function()
  it("destroys the QP first, then regions, rings, CQ, PD, device; twice is fine", L.async(function()
    local a, b = L.pair({ device = "soft" })
    assert(a:send("bye")) ; assert(a:flush())
    assert(a:close())
    assert.equal("qp,mr,mr,buf,buf,cq,pd,dev", a:teardown())
    assert(a:close())
    assert.equal("bye", b:recv(3, 5))
    local data, err = b:recv(1, 5)
    assert.is_nil(data)
    assert.matches("^EOF: link %d+: the peer closed the link", err)
    assert(b:close())
  end))
end)
