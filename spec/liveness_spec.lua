-- liveness_spec.lua - "peer gone" and "peer alive but not progressing" are
-- told apart the same way on every device (soft apple-uc, soft linux-rc,
-- tcp, the mlx5 model), each within its own bound:
--   - a stopped peer (SIGSTOP: its kernel still answers) is never declared
--     gone, however long it stays stopped; a send that moves nothing fails
--     after opts.stall when set ("the stall bound"), else at the call's
--     timeout ("the call's timeout"), and the link stays usable: once the
--     peer runs again (SIGCONT) the data flows;
--   - a killed peer (SIGKILL, stopped or not) is reported gone within the
--     liveness bound and breaks the link.
-- (A tcp link used to give up on a stopped reader at the liveness bound:
-- TCP_USER_TIMEOUT aborts a connection whose zero window lasts that long.)
local ffi = require("ffi")
local cjson = require("cjson")
local tbrt = require("tbrt")
local L = require("links")

local C = require("tbrt.ffi").C

local CASES = {
  { name = "soft apple-uc", opts = { device = "soft", personality = "apple-uc" } },
  { name = "soft linux-rc", opts = { device = "soft", personality = "linux-rc" } },
  { name = "tcp", opts = { device = "tcp" } },
  { name = "the mlx5 model", opts = { device = "mlx5" }, heavy = true },
}

local LIVENESS, STALL = 1, 0.5

-- Send 1 MiB messages until one fails; returns the error and the seconds it took.
local function send_until_error(l, buf, timeout)
  local t0 = tbrt.now()
  for _ = 1, 100000 do
    local ok, e = l:send(buf, 2 ^ 20, timeout)
    if ok then ok, e = l:flush(timeout) end
    if not ok then return e, tbrt.now() - t0 end
  end
  error("sending never failed")
end

-- A link to a "sink" peer (it reads all it gets) that has taken 2 MiB.
local function sink_link(case, extra)
  local opts = { liveness = LIVENESS }
  for k, v in pairs(case.opts) do opts[k] = v end
  for k, v in pairs(extra or {}) do opts[k] = v end
  local srv = assert(tbrt.listen("127.0.0.1", 0, opts))
  local peer = L.spawn_peer({ "sink", srv.port, cjson.encode(case.opts) })
  local l = assert(srv:accept(20))
  srv:close()
  assert(peer:expect("ready", 10))
  local buf = L.pattern(2 ^ 20)
  for _ = 1, 2 do assert(l:send(buf, 2 ^ 20)) ; assert(l:flush()) end
  return l, peer, buf
end

for _, case in ipairs(CASES) do
  -- the mlx5 model's case runs under the normal build only (not registered
  -- under the sanitizer's, so it never counts as a skip)
  local run = (case.heavy and os.getenv("TBRT_ASAN")) and function() end or it
  describe("a peer over " .. case.name, function()
    run("stopped past the liveness bound is alive: a send ends at the call's timeout, " ..
        "and the data flows when it runs again", L.async(function()
      local l, peer, buf = sink_link(case)
      peer:kill("sigstop")
      local t0 = tbrt.now()
      -- a plain C blocking call, bounded by its own timeout: past the liveness bound
      local budget = LIVENESS + 0.5
      local n
      repeat
        n = tonumber(C.tbrt_link_send_all(l._l, buf, 2 ^ 20, math.max(0.05, budget - (tbrt.now() - t0))))
      until n < 0 or tbrt.now() - t0 >= budget
      local why = ffi.string(C.tbrt_link_why(l._l))
      assert.equal(-110, n, "send_all ends with ETIMEDOUT: " .. why)
      assert.is_true(tbrt.now() - t0 >= LIVENESS, "stopped longer than the liveness bound")
      assert.matches("^link %d+: send: %d+ of 1048576 bytes accepted within [%d.]+ s %(the call's " ..
        "timeout%): the peer is alive", why)
      assert.equal("ready", l:info().state, "a stopped peer is not gone")
      peer:kill("sigcont")
      for _ = 1, 4 do assert(l:send(buf, 2 ^ 20, 10)) ; assert(l:flush(10)) end
      peer:kill("sigkill")
      peer:wait(5)
      l:close()
    end))

    run("stopped, a stall bound says alive but not progressing; killed, it is gone within " ..
        "the liveness bound", L.async(function()
      local l, peer, buf = sink_link(case, { stall = STALL })
      peer:kill("sigstop")
      local err, dt = send_until_error(l, buf, 30)
      assert.matches("^ETIMEDOUT: link %d+: %a+: peer alive but not progressing: nothing could be " ..
        "sent for [%d.]+ s %(the stall bound, opts%.stall 0%.5 s%)", err)
      assert.is_true(dt >= STALL and dt < STALL + 2, "the stall bound took " .. dt .. " s")
      assert.equal("ready", l:info().state, "a stall does not break the link")
      -- stopped, then killed: gone, and the link broken
      peer:kill("sigkill")
      err, dt = send_until_error(l, buf, 30)
      assert.is_true(dt < LIVENESS + 0.5, "noticed after " .. dt .. " s: " .. err)
      assert.is_nil(err:match("not progressing"), err)
      assert.matches("^E[A-Z]+: link %d+: ", err)
      assert.equal("broken", l:info().state)
      peer:wait(5)
      l:close()
    end))
  end)
end

-- The bootstrap socket's keepalive: probes each second, given up only after
-- two unanswered (a lost probe is no death), the count following the
-- liveness bound, also when settimeouts changes it after setup.
pcall(ffi.cdef, "int getsockopt(int fd, int level, int name, void *val, unsigned int *len);")
describe("the bootstrap socket's keepalive", function()
  local IPPROTO_TCP, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT = 6, 4, 5, 6
  local function opt(fd, name)
    local v, len = ffi.new("int[1]"), ffi.new("unsigned int[1]", 4)
    assert.equal(0, ffi.C.getsockopt(fd, IPPROTO_TCP, name, v, len))
    return v[0]
  end
  local a, b
  after_each(L.async(function()
    if a then a:close() end
    if b then b:close() end
    a, b = nil, nil
  end))

  it("gives up after two unanswered probes at least, and follows settimeouts", L.async(function()
    a, b = L.pair({ device = "soft", personality = "linux-rc", liveness = 2 })
    local _, _, sock = a:_fds()
    assert.equal(1, opt(sock, TCP_KEEPIDLE))
    assert.equal(1, opt(sock, TCP_KEEPINTVL))
    assert.equal(2, opt(sock, TCP_KEEPCNT), "a 2 s bound would give up on one lost probe")
    a:settimeouts(nil, 10)
    assert.equal(9, opt(sock, TCP_KEEPCNT))
    a:settimeouts(nil, 0.5)
    assert.equal(2, opt(sock, TCP_KEEPCNT))
    -- and the link still works
    assert(a:send("x", 1)) ; assert(a:flush())
    assert.equal("x", b:recv(1, 5))
  end))
end)
