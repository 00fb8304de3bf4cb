-- waits_spec.lua - a wait that times out says what to check: a recv whose
-- peer sent nothing points at the peer's send and flush (what it did not
-- flush cannot be seen from here); a recv on a link whose own bytes are
-- still unsent, or whose frames the peer has not taken, says so; the
-- readiness wait asks whether the other end activates; callers that wait
-- themselves get the same messages (tbrt_link_timed_out); a flush the
-- socket has no room for says EAGAIN, and flush_all waits for it. (The caps
-- exchange that got 0 bytes is in quickstart_spec.lua.)
local ffi = require("ffi")
local tbrt = require("tbrt")
local task = require("tbrt.task")
local L = require("links")

local C = require("tbrt.ffi").C
local ETIMEDOUT = -110

local function why(l) return ffi.string(C.tbrt_link_why(l._l)) end

-- Send without waiting until the link takes no more; returns bytes taken.
local function fill(l)
  local buf, total = L.pattern(2 ^ 20), 0
  for _ = 1, 256 do
    local n = tonumber(C.tbrt_link_send(l._l, buf, 2 ^ 20))
    if n == -11 then
      if C.tbrt_link_flush(l._l) == -11 or C.tbrt_link_inflight(l._l) > 0 then
        C.tbrt_link_progress(l._l)
        if tonumber(C.tbrt_link_send(l._l, buf, 2 ^ 20)) == -11 then break end
      end
    elseif n > 0 then
      total = total + n
    else
      error("send: " .. why(l))
    end
  end
  return total
end

describe("a wait that times out", function()
  it("on a recv the peer sent nothing for: check the peer's send and flush", L.async(function()
    for _, device in ipairs({ "tcp", "soft" }) do
      local a, b = L.pair({ device = device })
      local buf = ffi.new("uint8_t[8]")
      assert.equal(ETIMEDOUT, tonumber(C.tbrt_link_recv_all(a._l, buf, 5, 0.2)))
      assert.matches("^link %d+: recv: 0 of 5 bytes arrived within 0%.2 s %(the call's timeout%); " ..
        "the peer is alive %(it was not reported gone within the liveness bound%) but sent " ..
        "nothing more: check that it sends, and flushes after its last send", why(a))
      assert.equal("ready", a:info().state, "a timeout does not break the link")
      -- a send without a flush is exactly that
      assert(b:send("hi"))
      assert.equal(ETIMEDOUT, tonumber(C.tbrt_link_recv_all(a._l, buf, 2, 0.2)), device)
      assert(b:flush())
      assert.equal("hi", assert(a:recv(2, 5)))
      a:close() ; b:close()
    end
  end))

  it("on a recv while this link's own bytes wait to be written (tcp), says so", L.async(function()
    local a, b = L.pair({ device = "tcp", timeout = 1 })
    assert.is_true(fill(a) > 0)
    local buf = ffi.new("uint8_t[8]")
    assert.equal(ETIMEDOUT, tonumber(C.tbrt_link_recv_all(a._l, buf, 5, 0.2)))
    assert.matches("^link %d+: recv: 0 of 5 bytes arrived within 0%.2 s %(the call's timeout%), " ..
      "and %d+ bytes this link sent still wait in its socket, not taken by the peer %(it is not " ..
      "reading%): if the peer waits for those before it answers, both ends wait", why(a))
    a:close() ; b:close()
  end))

  it("on a recv while frames this link sent are not taken by the peer (RDMA), says so", L.async(function()
    local a, b = L.pair({ device = "soft", personality = "apple-uc", nbuf = 4, timeout = 1 })
    assert.is_true(fill(a) > 0)
    assert.is_true(C.tbrt_link_inflight(a._l) > 0)
    local buf = ffi.new("uint8_t[8]")
    assert.equal(ETIMEDOUT, tonumber(C.tbrt_link_recv_all(a._l, buf, 5, 0.2)))
    assert.matches("^link %d+: recv: 0 of 5 bytes arrived within 0%.2 s %(the call's timeout%), " ..
      "and %d+ frames this link sent are not taken by the peer yet %(its receives are not posted: " ..
      "it is not reading%)", why(a))
    a:close() ; b:close()
  end))

  it("on a flush the socket has no room for (tcp): flush says EAGAIN, flush_all waits for the " ..
    "peer's reads, and says what to check when they do not come", L.async(function()
    local cjson = require("cjson")
    local opts = { device = "tcp", timeout = 5 }
    local srv = assert(tbrt.listen("127.0.0.1", 0, opts))
    local peer = L.spawn_peer({ "sink", srv.port, cjson.encode(opts) })
    local l = assert(srv:accept(20))
    srv:close()
    assert(peer:expect("ready", 20))
    peer:kill("sigstop")              -- its kernel still answers; it reads nothing
    assert.is_true(fill(l) > 0)
    -- the kernel grows the buffers for a moment: full is when a while later
    -- it still takes nothing
    for _ = 1, 50 do
      task.sleep(0.2)
      if fill(l) == 0 then break end
    end
    local small = ffi.new("uint8_t[100]")
    assert.equal(100, tonumber(C.tbrt_link_send(l._l, small, 100)))   -- coalesced
    assert.equal(-11, C.tbrt_link_flush(l._l))
    assert.equal(ETIMEDOUT, C.tbrt_link_flush_all(l._l, 0.2))
    assert.matches("^link %d+: flush: 100 bytes not written within 0%.2 s %(the call's timeout%): " ..
      "the peer is alive %(it was not reported gone within the liveness bound%) but not reading",
      why(l))
    assert.equal("ready", l:info().state, "a timeout does not break the link")
    peer:kill("sigcont")              -- it reads again: the flush goes through
    assert.equal(0, C.tbrt_link_flush_all(l._l, 20))
    assert.equal(0, C.tbrt_link_inflight(l._l))
    assert.equal(0, C.tbrt_link_flush_all(l._l, 0))   -- nothing to flush: at once
    peer:kill("sigkill")
    l:close()
  end))

  it("waiting for readiness asks whether the other end activates", L.async(function()
    local srv = assert(tbrt.tcp_listen("127.0.0.1", 0))
    local t = task.spawn(function() return srv:accept(5) end)
    local s1 = assert(tbrt.tcp_connect("127.0.0.1", srv.port, 5))
    local s2 = assert(t:join(5))
    srv:close()
    local la = assert(tbrt.probe(s1, { device = "soft", timeout = 0.2 }))
    local lb = assert(tbrt.probe(s2, { device = "soft" }))
    assert.equal(ETIMEDOUT, C.tbrt_link_activate_wait(la._l, lb:caps(), 24))
    assert.matches("^link %d+: readiness: no byte from the peer within 0%.2 s: is the other end " ..
      "activating its side %(activate after the caps exchange%)%?$", why(la))
    la:close() ; lb:close()
  end))

  it("gives callers that wait themselves the same message", L.async(function()
    local a, b = L.pair({ device = "soft" })
    assert.equal(ETIMEDOUT, C.tbrt_link_timed_out(a._l, C.TBRT_WAIT_RECV, 3, 10, 1.5))
    assert.matches("^link %d+: recv: 3 of 10 bytes arrived within 1%.5 s %(the call's timeout%); " ..
      "the peer is alive", why(a))
    assert.equal(ETIMEDOUT, C.tbrt_link_timed_out(a._l, C.TBRT_WAIT_SEND, 0, 7, 2))
    assert.matches("^link %d+: send: 0 of 7 bytes accepted within 2 s %(the call's timeout%): the " ..
      "peer is alive %(it was not reported gone within the liveness bound%) but not reading", why(a))
    assert.equal("ready", a:info().state)
    a:close() ; b:close()
  end))

  it("from Lua says the same: recv, send, readiness and a caps exchange that got nothing", L.async(function()
    local a, b = L.pair({ device = "soft" })
    local ok, err = a:recv(5, 0.2)
    assert.is_nil(ok)
    assert.matches("^ETIMEDOUT: link %d+: recv: 0 of 5 bytes arrived within 0%.2 s %(the call's " ..
      "timeout%); the peer is alive", err)
    a:close() ; b:close()
    -- a listener that accepts the TCP connection but never answers the caps
    local srv = assert(tbrt.tcp_listen("127.0.0.1", 0))
    local held
    local t = task.spawn(function() held = srv:accept(5) end)
    local l, cerr = tbrt.connect("127.0.0.1", srv.port, { device = "soft", timeout = 0.3 })
    assert.is_nil(l)
    assert.matches("^ETIMEDOUT: caps exchange: 0 of 24 bytes from the peer within 0%.3 s: is the " ..
      "other end accepting %(tbrt%.listen %+ accept", cerr)
    t:join(5)
    if held then held:close() end
    srv:close()
  end))
end)
