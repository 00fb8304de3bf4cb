-- pair_listen_spec.lua - scripts/pair.lua --listen as a server against bad
-- and slow peers: silent, trickling and garbage connections are dropped
-- with a logged reason within the setup bound while a good peer, connected
-- at the same time, completes; --once; all-zero caps ("peer has no RDMA:
-- staying on TCP") and ends that ask for different links.
local tbrt = require("tbrt")
local task = require("tbrt.task")
local H = require("helpers")
local L = require("links")

local PAIR = H.root .. "/scripts/pair.lua"

local function args_of(list)
  local full = { PAIR }
  for _, a in ipairs(list) do full[#full + 1] = a end
  return full
end

-- Start a listener; returns its handle and port.
local function listener(list)
  local h = H.spawn(H.tbrt, args_of(list))
  assert(h:expect("listening on", 20), "the listener did not start: " .. h:stderr())
  local port = tonumber(h:stdout():match("listening on [^\n]*:(%d+)"))
  return h, assert(port)
end

local function connect(port)
  return assert(tbrt.tcp_connect("127.0.0.1", port, 5))
end

local function count(text, plain)
  local n, at = 0, 1
  while true do
    local s, e = text:find(plain, at, true)
    if not s then return n end
    n, at = n + 1, e + 1
  end
end

describe("pair.lua --listen", function()
  it("drops silent, slow and garbage connections with a reason and still serves a good peer", L.async(function()
    local h, port = listener({ "--listen", "127.0.0.1:0", "--device", "soft", "--personality",
      "linux-rc", "--setup-timeout", "1", "--timeout", "20" })
    local silent = connect(port)                       -- says nothing
    local garbage = connect(port)
    assert(garbage:send("GET / HTTP/1.1\r\nHost: tbrt\r\n\r\n"))
    local short = connect(port)                        -- 16 bytes, then gone
    assert(short:send("0123456789abcdef"))
    short:close()
    local trickle = connect(port)                      -- a byte now and then
    local trickling = task.spawn(function()
      for _ = 1, 12 do
        if not trickle:send("\1") then return end
        task.sleep(0.2)
      end
    end)
    assert(h:expect("16 of 24 bytes", 10, "err"), h:stderr())
    assert(h:expect("qpn 0x20544547 exceeds 24 bits", 10, "err"), h:stderr())
    -- the silent and the trickling ones: dropped at the setup bound
    local t0 = tbrt.now()
    assert(task.wait(function() return count(h:stderr(), "within the setup bound (1 s)") >= 2 end, 10),
      h:stderr())
    assert.is_true(tbrt.now() - t0 < 3, "dropped after the 1 s bound, not the 20 s data timeout")
    -- a good peer while yet another silent connection is open
    local hold = connect(port)
    local r = H.run(H.tbrt, args_of({ "--connect", "127.0.0.1:" .. port, "--device", "soft",
      "--personality", "linux-rc", "--sizes", "8,64K", "--iters", "10" }), { timeout = 60 })
    assert.equal(0, r.code, H.describe(r))
    assert.matches("64 KiB%s+10%s", r.stdout)
    local done = h:wait(20)
    assert.equal(0, done.code, done.stderr)
    local log = done.stderr
    assert.matches("pair.lua: connection %d+ from 127%.0%.0%.1:%d+: dropped during setup: " ..
      "EINVAL: link %d+: activate: caps: qpn 0x20544547", log)
    assert.matches("connection %d+ from [%d.:]+: dropped during setup: EOF: caps exchange with " ..
      "[%d.:]+: the peer closed the socket after 16 of 24 bytes", log)
    assert.equal(2, count(log, "dropped during setup: ETIMEDOUT: caps exchange with 127.0.0.1:"))
    assert.matches("connection %d+ from [%d.:]+: done: %d+ requests served", log)
    assert.matches("connection %d+ from [%d.:]+: closed: the listener is done", log)
    trickling:join(5)
    for _, s in ipairs({ silent, garbage, trickle, hold }) do s:close() end
  end))

  it("with --once stops after the first connection, and says why once", L.async(function()
    local h, port = listener({ "--listen", "127.0.0.1:0", "--device", "tcp", "--once" })
    local s = connect(port)
    assert(s:send(string.rep("\255", 24)))
    local r = h:wait(20)
    s:close()
    assert.equal(1, r.code, r.stderr)
    assert.equal(1, count(r.stderr, "pair.lua: "), r.stderr)
    assert.matches("^pair.lua: connection 1 from 127%.0%.0%.1:%d+: dropped during setup: ", r.stderr)
  end))

  it("says 'peer has no RDMA: staying on TCP' once for a peer with all-zero caps", L.async(function()
    local h, port = listener({ "--listen", "127.0.0.1:0", "--device", "soft", "--fallback" })
    local r = H.run(H.tbrt, args_of({ "--connect", "127.0.0.1:" .. port, "--device", "tcp",
      "--sizes", "8", "--iters", "5" }), { timeout = 60 })
    assert.equal(0, r.code, H.describe(r))
    assert.matches("link: tcp", r.stdout)
    local done = h:wait(20)
    assert.equal(0, done.code, done.stderr)
    assert.equal(1, count(done.stderr, "peer has no RDMA: staying on TCP"), done.stderr)
    assert.matches("connection 1 from [%d.:]+: peer has no RDMA: staying on TCP\n", done.stderr)
  end))

  it("fails ends that ask for different links instead of using TCP quietly", L.async(function()
    -- an explicit RDMA device facing a tcp end: the RDMA end says why
    local h, port = listener({ "--listen", "127.0.0.1:0", "--device", "tcp", "--once" })
    local r = H.run(H.tbrt, args_of({ "--connect", "127.0.0.1:" .. port, "--device", "soft",
      "--sizes", "8", "--iters", "5" }), { timeout = 60 })
    assert.equal(1, r.code, H.describe(r))
    assert.matches("^pair.lua: ENOTSUP: link %d+: caps exchange: the peer offers no RDMA %(it sent " ..
      "all%-zero caps", r.stderr)
    assert.equal(1, h:wait(20).code)
    -- and the other way round: the listener drops the connection, naming it
    h, port = listener({ "--listen", "127.0.0.1:0", "--device", "soft", "--once" })
    r = H.run(H.tbrt, args_of({ "--connect", "127.0.0.1:" .. port, "--device", "tcp",
      "--sizes", "8", "--iters", "5" }), { timeout = 60 })
    assert.equal(1, r.code, H.describe(r))
    local done = h:wait(20)
    assert.equal(1, done.code)
    assert.matches("dropped during setup: ENOTSUP: link %d+: caps exchange: the peer offers no RDMA",
      done.stderr)
  end))
end)
