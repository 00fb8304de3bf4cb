-- view_spec.lua - zero-copy views (link:send_view/commit, recv_view/release;
-- tbrt_link_send_view ... in C): streaming through them on every transport
-- and framing, every byte checked; the size rules (never across strides);
-- partial commits and releases mixed with send/recv; misuse raising in Lua
-- and -EINVAL with a message in C; a view held while the peer dies and
-- across close.
local ffi = require("ffi")
local core = require("tbrt.ffi")
local task = require("tbrt.task")
local L = require("links")

local C = core.C
local EINVAL, EAGAIN = -22, -11

local KINDS = {
  { name = "soft linux-rc (variable)", opts = { device = "soft", personality = "linux-rc" },
    max = 128 * 1024 - 16 },
  { name = "soft apple-uc (fixed)", opts = { device = "soft", personality = "apple-uc" },
    max = 128 * 1024 - 16 },
  { name = "llama-apple", opts = { device = "soft", personality = "apple-uc", framing = "llama-apple" },
    max = 128 * 1024 - 8 },
  { name = "llama-linux", opts = { device = "soft", personality = "linux-rc", framing = "llama-linux" },
    max = 256 * 1024 },
  -- tcp: the coalescing buffer for send views, one recv() of up to as much for recv views
  { name = "tcp", opts = { device = "tcp" }, max = 256 * 1024 },
}

-- Send n bytes of src through send views of at most `piece` bytes each.
local function send_by_views(l, src, n, piece)
  local off, biggest = 0, 0
  while off < n do
    local p, got = assert(l:send_view(math.min(piece, n - off)))
    assert(got >= 1 and got <= piece)
    biggest = math.max(biggest, got)
    ffi.copy(p, src + off, got)
    assert(l:commit(got))
    off = off + got
  end
  assert(l:flush())
  return biggest
end

-- Receive n bytes into dst through recv views; returns the largest view.
local function recv_by_views(l, dst, n)
  local got, biggest = 0, 0
  while got < n do
    local p, len = assert(l:recv_view(10))
    biggest = math.max(biggest, len)
    local take = math.min(len, n - got)
    ffi.copy(dst + got, p, take)
    assert(l:release(take))
    got = got + take
  end
  return biggest
end

describe("zero-copy views", function()
  for _, k in ipairs(KINDS) do
    it("stream 3 MiB both ways on " .. k.name .. ", no view larger than " .. k.max .. " bytes " ..
      "(" .. (k.rmax or k.max) .. " received)",
      L.async(function()
        local a, b, ea, eb = L.pair(k.opts)
        assert(a, ea) ; assert(b, eb)
        local n = 3 * 2 ^ 20 + 12345
        local src = L.pattern(n, 5)
        local dst = ffi.new("uint8_t[?]", n)
        local t = task.spawn(function() return send_by_views(a, src, n, 2 ^ 30) end)
        local biggest_recv = recv_by_views(b, dst, n)
        local biggest_send = t:join(20)
        assert.is_nil(L.check(dst, n, 5))
        assert.equal(k.max, biggest_send)
        assert.is_true(biggest_recv <= (k.rmax or k.max))
        -- and back, the answer read with plain recv
        t = task.spawn(function() return send_by_views(b, src, n, 100000) end)
        local back = ffi.new("uint8_t[?]", n)
        assert.equal(n, a:recv_into(back, n, 20))
        assert(t:join(20))
        assert.is_nil(L.check(back, n, 5))
        assert.equal(n, a:stats().bytes_sent) ; assert.equal(n, b:stats().bytes_recv)
        a:close() ; b:close()
      end))
  end

  it("give back what a partial commit did not send, and keep what a partial release left",
    L.async(function()
      local a, b = L.pair({ device = "soft", personality = "linux-rc" })
      local p, n = assert(a:send_view(100))
      assert.equal(100, n)
      ffi.copy(p, "hello, world", 12)
      assert(a:commit(5))                       -- "hello"; 95 bytes given back
      local q, m = assert(a:send_view())        -- the rest of the stride, right after
      assert.equal(128 * 1024 - 16 - 5, m)
      assert.equal(tonumber(ffi.cast("uintptr_t", p)) + 5, tonumber(ffi.cast("uintptr_t", q)))
      ffi.copy(q, "!", 1)
      assert(a:commit(1))
      assert(a:send(" and more"))
      assert(a:flush())
      local r, len = assert(b:recv_view(5))
      assert.equal("hello! and more", ffi.string(r, len))
      assert(b:release(6))                      -- "hello!" taken, the rest stays
      assert.equal(" and", b:recv(4, 5))         -- plain recv continues there
      r, len = assert(b:recv_view(5))
      assert.equal(" more", ffi.string(r, len))
      local r2, len2 = b:recv_view(0.05)         -- releases the open view, then waits
      assert.is_nil(r2) ; assert.matches("^ETIMEDOUT", len2)
      assert.equal(15, b:stats().bytes_recv)
      a:close() ; b:close()
    end))

  it("a view wants what fits: a full stride means a fresh one, flush() starts one early",
    L.async(function()
      local a, b = L.pair({ device = "soft", personality = "linux-rc", stride = 8192 })
      local payload = 8192 - 16
      local _, n = assert(a:send_view(payload - 10))
      assert(a:commit(n))
      local _, n2 = assert(a:send_view(100))     -- only 10 bytes left in this stride
      assert.equal(10, n2)
      assert(a:commit(0))
      assert(a:flush())                         -- post it; the next view has a whole stride
      local _, n3 = assert(a:send_view(100))
      assert.equal(100, n3)
      assert(a:commit(0))
      local buf = ffi.new("uint8_t[?]", payload)
      assert.equal(payload - 10, b:recv_into(buf, payload - 10, 5))
      a:close() ; b:close()
    end))

  it("raise on misuse in Lua, naming the call", L.async(function()
    local a, b = L.pair({ device = "soft", personality = "linux-rc" })
    assert.has_error(function() a:commit(1) end, "commit: link " .. a.id .. ": no send view is open")
    assert.has_error(function() b:release() end, "release: link " .. b.id .. ": no recv view is open")
    assert.has_error(function() a:send_view(-1) end, "send_view: expected a byte count, got -1")
    local _, n = assert(a:send_view(10))
    assert.has_error(function() a:send_view(10) end,
      "send_view: link " .. a.id .. ": a send view of 10 bytes is open (commit it first)")
    assert.has_error(function() a:commit(n + 1) end,
      "commit: link " .. a.id .. ": 11 bytes, but the send view holds 10")
    assert.has_error(function() a:send("x") end,
      "send: link " .. a.id .. ": a send view of 10 bytes is open (commit it first)")
    assert.has_error(function() a:flush() end,
      "flush: link " .. a.id .. ": a send view of 10 bytes is open (commit it first)")
    assert(a:commit(n))                         -- the view stayed usable
    assert(a:flush())
    local _, m = assert(b:recv_view(5))
    assert.equal(10, m)
    assert.has_error(function() b:recv(1, 1) end,
      "recv: link " .. b.id .. ": a recv view of 10 bytes is open (release it first)")
    assert.has_error(function() b:release(11) end,
      "release: link " .. b.id .. ": 11 bytes, but the recv view holds 10")
    assert(b:release())
    a:close() ; b:close()
    assert.has_error(function() a:send_view(1) end, "send_view: link is closed")
  end))

  it("return -EINVAL with a message from the C calls on misuse", L.async(function()
    local a, b = L.pair({ device = "soft", personality = "linux-rc" })
    local la, lb = a._l, b._l
    local why = function(l) return ffi.string(C.tbrt_link_why(l)) end
    local sp = ffi.new("uint8_t *[1]")
    local rp = ffi.new("const uint8_t *[1]")
    assert.equal(EINVAL, C.tbrt_link_commit(la, 0))
    assert.matches("link %d+: commit: no send view is open", why(la))
    assert.equal(EINVAL, C.tbrt_link_release(lb, 0))
    assert.matches("link %d+: release: no recv view is open", why(lb))
    assert.equal(EAGAIN, tonumber(C.tbrt_link_recv_view(lb, rp)))
    assert.equal(64, tonumber(C.tbrt_link_send_view(la, 64, sp)))
    assert.equal(EINVAL, tonumber(C.tbrt_link_send_view(la, 64, sp)))
    assert.matches("send_view: a send view of 64 bytes is open %(commit it first%)", why(la))
    assert.equal(EINVAL, tonumber(C.tbrt_link_send(la, "x", 1)))
    assert.matches("link %d+: send: a send view of 64 bytes is open", why(la))
    assert.equal(EINVAL, C.tbrt_link_flush(la))
    assert.equal(EINVAL, C.tbrt_link_commit(la, 65))
    assert.matches("commit: 65 bytes, but the send view holds 64", why(la))
    ffi.fill(sp[0], 64, 0x5a)
    assert.equal(0, C.tbrt_link_commit(la, 64))
    assert.equal(0, C.tbrt_link_flush(la))
    -- blocking variants: the bytes arrive; a second wait times out, bounded
    assert.equal(64, tonumber(C.tbrt_link_recv_view_wait(lb, rp, 5)))
    assert.equal(0x5a, rp[0][63])
    assert.equal(EINVAL, tonumber(C.tbrt_link_recv(lb, ffi.new("uint8_t[1]"), 1)))
    assert.matches("recv: a recv view of 64 bytes is open %(release it first%)", why(lb))
    local t0 = require("tbrt").now()
    assert.equal(-110, tonumber(C.tbrt_link_recv_view_wait(lb, rp, 0.05)))   -- ETIMEDOUT
    assert.is_true(require("tbrt").now() - t0 < 2)
    assert.matches("recv_view: nothing arrived within 0.05 s", why(lb))
    assert.equal(EINVAL, C.tbrt_link_release(lb, 1))   -- the wait released the old view
    a:close() ; b:close()
  end))

  it("wait for a free stride, bounded, when the peer does not read", L.async(function()
    -- (no eager frames: the peer's eager offer would take one of its two
    -- receives, which it never reads)
    local a, b = L.pair({ device = "soft", personality = "linux-rc", nbuf = 2, stride = 4096,
      eager = false })
    -- the peer's two receives fill, then our two strides stay in flight
    local strides, p, err = 0, nil, nil
    repeat
      local n
      p, n = a:send_view(nil, 0.1)
      if p then assert(a:commit(n)) ; strides = strides + 1 else err = n end
    until not p or strides > 8
    assert.equal(4, strides)
    assert.matches("^ETIMEDOUT: link %d+: send_view: no room within 0.1 s", err)
    a:close() ; b:close()
  end))

  it("keep a view valid while the peer dies, and fail the commit with the link's error",
    L.async(function()
      local srv = assert(require("tbrt").listen("127.0.0.1", 0,
        { device = "soft", personality = "linux-rc", liveness = 1 }))
      local peer = L.spawn_peer({ "source", srv.port, '{"device":"soft","personality":"linux-rc"}' })
      local l = assert(srv:accept(10))
      srv:close()
      assert(peer:expect("ready"))
      local p, n = assert(l:recv_view(10))
      local first = ffi.string(p, math.min(n, 64))
      local sp, sn = assert(l:send_view(32))
      peer:kill("sigkill")
      peer:wait(5)
      -- the link notices within its liveness bound
      local deadline = require("tbrt").now() + 5
      while C.tbrt_link_progress(l._l) >= 0 and require("tbrt").now() < deadline do task.sleep(0.01) end
      assert.equal("broken", l:info().state)
      assert.equal(first, ffi.string(p, math.min(n, 64)))   -- still readable
      ffi.fill(sp, sn, 1)                                   -- still writable
      local ok, err = l:commit(sn)
      assert.is_nil(ok)
      assert.matches("^ECONNRESET: link %d+: peer closed the bootstrap socket", err)
      assert(l:release())
      l:close()
    end))

  it("leave a view open at close pointing at harmless memory", L.async(function()
    for _, k in ipairs({ KINDS[1], KINDS[5] }) do
      local a, b = L.pair(k.opts)
      local sp, sn = assert(a:send_view())
      assert(b:send("abc")) ; assert(b:flush())
      local rp, rn = assert(a:recv_view(5))
      assert.equal("abc", ffi.string(rp, rn))
      assert(a:close())
      -- both rings are gone; their addresses are fresh zero pages now
      ffi.fill(sp, sn, 0x77)
      assert.equal(0x77, sp[sn - 1])
      assert.equal(0, ffi.cast("const uint8_t *", rp)[0])
      b:close()
    end
  end))
end)
