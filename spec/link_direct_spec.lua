-- link_direct_spec.lua - direct transfers (link:register, tbrt_link_mem_reg):
-- a send of 32 KiB or more from registered memory is offered and read by
-- the peer with RDMA READs, straight into its registered buffer or through
-- a stride; the stream keeps its order around them; misuse (another buffer
-- while one is lent, unregistering it) is refused with a reason; other
-- links take register and stay on their own path; hostile offers and done
-- frames fail the reader with a reason; and between two processes
-- (pair.lua --register) every byte still checks, the large READs shared
-- with the lending process.
local ffi = require("ffi")
local cjson = require("cjson")
local core = require("tbrt.ffi")
local task = require("tbrt.task")
local tbrt = require("tbrt")
local L = require("links")
local H = require("helpers")

local C = core.C
local EAGAIN, EBUSY = -11, -16
pcall(ffi.cdef, "int shutdown(int fd, int how);")
local RC = { device = "soft", personality = "linux-rc" }

-- send n bytes of p on a (a task), receive them into dst on b: the count
local function move(a, b, p, n, dst, timeout)
  local t = task.spawn(function()
    assert(a:send(p, n, timeout))
    assert(a:flush())
    return true
  end)
  local got, err = b:recv_into(dst, n, timeout or 20)
  assert(t:join(20))
  return got, err
end

describe("direct transfers", function()
  for _, wire in ipairs({ "shm", "udp" }) do
  it("a large send from registered memory is read straight into the reader's registered buffer ("
    .. wire .. " wire)",
    L.async(function()
      local a, b = L.pair({ device = "soft", personality = "linux-rc", wire = wire })
      local n = 3 * 2 ^ 20 + 12345
      local src, dst = L.pattern(n, 7), ffi.new("uint8_t[?]", n)
      assert(a:register(src, n)) ; assert(b:register(dst, n))
      assert.equal(n, move(a, b, src, n, dst))
      assert.is_nil(L.check(dst, n, 7))
      local sa, sb = a:stats(), b:stats()
      assert.equal(1, sa.direct_sends) ; assert.equal(1, sb.direct_recvs)
      assert.equal(n, sb.direct_bytes)
      assert.equal(n, sa.bytes_sent) ; assert.equal(n, sb.bytes_recv)
      -- the other way too: each end both lends and reads
      ffi.fill(src, n)
      local back = L.pattern(n, 7)
      ffi.copy(dst, back, n)
      assert.equal(n, move(b, a, dst, n, src))
      assert.is_nil(L.check(src, n, 7))
      assert.equal(1, b:stats().direct_sends) ; assert.equal(1, a:stats().direct_recvs)
      a:close() ; b:close()
    end))
  end

  it("keeps the stream's order around direct sends, small sends and sends below 32 KiB",
    L.async(function()
      local a, b = L.pair(RC)
      local n = 256 * 1024
      local src = L.pattern(n, 3)
      assert(a:register(src, n))
      -- head (coalesced), 100 KiB direct, 1000 B from registered memory
      -- (the ring), 64 KiB direct from an odd offset, tail
      local parts = { { "head" }, { src, 100 * 1024 }, { src + 5, 1000 }, { src + 7, 65536 },
        { "tail!" } }
      local want, total = {}, 0
      for _, p in ipairs(parts) do
        local s = type(p[1]) == "string" and p[1] or ffi.string(p[1], p[2])
        want[#want + 1] = s
        total = total + #s
      end
      want = table.concat(want)
      local t = task.spawn(function()
        for _, p in ipairs(parts) do assert(a:send(p[1], p[2])) end
        assert(a:flush())
        return true
      end)
      local dst = ffi.new("uint8_t[?]", total)
      assert(b:register(dst, total))
      assert.equal(total, b:recv_into(dst, total, 20))
      assert(t:join(20))
      assert.is_true(ffi.string(dst, total) == want)
      assert.equal(2, a:stats().direct_sends)
      assert.equal(2, b:stats().direct_recvs)
      a:close() ; b:close()
    end))

  it("a reader without registered memory takes an offer through a stride, by recv and by views",
    L.async(function()
      local a, b = L.pair(RC)
      local n = 2 ^ 20 + 99
      local src, dst = L.pattern(n, 9), ffi.new("uint8_t[?]", n)
      assert(a:register(src, n))
      assert.equal(n, move(a, b, src, n, dst))
      assert.is_nil(L.check(dst, n, 9))
      local sb = b:stats()
      assert.equal(1, sb.direct_recvs) ; assert.equal(0, sb.direct_bytes)
      -- recv views of an offer: a stride payload at most, every byte right
      ffi.fill(dst, n)
      local t = task.spawn(function() assert(a:send(src, n)) ; assert(a:flush()) ; return true end)
      local got, biggest = 0, 0
      while got < n do
        local p, len = assert(b:recv_view(10))
        biggest = math.max(biggest, len)
        local take = math.min(len, n - got, 50000)
        ffi.copy(dst + got, p, take)
        assert(b:release(take))
        got = got + take
      end
      assert(t:join(20))
      assert.is_nil(L.check(dst, n, 9))
      assert.is_true(biggest <= 128 * 1024 - 16)
      assert.equal(2, b:stats().direct_recvs)
      a:close() ; b:close()
    end))

  it("refuses another buffer while one is lent, and unregistering it; names each misuse",
    L.async(function()
      local a, b = L.pair(RC)
      local n = 65536
      local src, other = L.pattern(n, 1), ffi.new("uint8_t[16]")
      assert(a:register(src, n))
      -- the C API: the first call lends the buffer, the next with it waits
      assert.equal(EAGAIN, tonumber(C.tbrt_link_send(a._l, src, n)))
      assert.equal(EAGAIN, tonumber(C.tbrt_link_send(a._l, src, n)))
      assert.equal(EBUSY, tonumber(C.tbrt_link_send(a._l, other, 16)))
      assert.matches("lent to the peer", ffi.string(C.tbrt_link_why(a._l)), 1, true)
      local ok, err = a:unregister(src)
      assert.is_nil(ok) ; assert.matches("^EBUSY: .*lent to the peer", err)
      local dst = ffi.new("uint8_t[?]", n)
      assert.equal(n, b:recv_into(dst, n, 10))
      assert.is_nil(L.check(dst, n, 1))
      -- the done comes back: the same call now takes the bytes
      local r, deadline = EAGAIN, os.time() + 10
      while r == EAGAIN and os.time() < deadline do
        C.tbrt_link_progress(a._l)
        r = tonumber(C.tbrt_link_send(a._l, src, n))
      end
      assert.equal(n, r)
      assert(a:unregister(src))
      ok, err = a:unregister(src)
      assert.is_nil(ok) ; assert.matches("^ENOENT: .*not the start of a region", err)
      assert(a:register(src, n))
      ok, err = a:register(src, n)
      assert.is_nil(ok) ; assert.matches("^EEXIST: ", err)
      local keep = {}
      for i = 2, 8 do
        keep[i] = ffi.new("uint8_t[4096]")
        assert(a:register(keep[i], 4096))
      end
      ok, err = a:register(ffi.new("uint8_t[4096]"), 4096)
      assert.is_nil(ok) ; assert.matches("^ENOSPC: .*8 regions", err)
      assert.has_error(function() a:register("a string", 8) end, "register: buf must be a cdata buffer, got string")
      assert.has_error(function() a:register(src, 0) end)
      a:close() ; b:close()
    end))

  it("a recv whose READ is in flight returns EAGAIN and goes on in the next, also into another buffer",
    L.async(function()
      -- the UDP wire answers a READ only when the lender's side polls: here
      -- both ends are this thread, so the first recv finds it in flight
      local a, b = L.pair({ device = "soft", personality = "linux-rc", wire = "udp" })
      local n = 256 * 1024
      local src, dst1, dst2 = L.pattern(n, 6), ffi.new("uint8_t[?]", n), ffi.new("uint8_t[?]", n)
      assert(a:register(src, n)) ; assert(b:register(dst1, n))
      assert.equal(EAGAIN, tonumber(C.tbrt_link_send(a._l, src, n)))
      local deadline = os.time() + 10
      while C.tbrt_link_readable(b._l) == 0 and os.time() < deadline do   -- the offer
        C.tbrt_link_progress(a._l) ; C.tbrt_link_progress(b._l)
      end
      assert.equal(n, tonumber(C.tbrt_link_readable(b._l)))
      local r = tonumber(C.tbrt_link_recv(b._l, dst1, n))
      assert.equal(EAGAIN, r)
      assert.equal(0, tonumber(C.tbrt_link_readable(b._l)))
      -- the buffer a READ lands in cannot be unregistered meanwhile
      local ok, err = b:unregister(dst1)
      assert.is_nil(ok) ; assert.matches("^EBUSY: ", err)
      -- the lender answers; the reader comes back with an unregistered buffer
      deadline = os.time() + 10
      while C.tbrt_link_readable(b._l) == 0 and os.time() < deadline do
        C.tbrt_link_progress(a._l) ; C.tbrt_link_progress(b._l)
      end
      assert.is_true(tonumber(C.tbrt_link_readable(b._l)) > 0)
      local got = 0
      while got < n and os.time() < deadline do
        C.tbrt_link_progress(a._l)
        local k = tonumber(C.tbrt_link_recv(b._l, dst2 + got, n - got))
        if k > 0 then got = got + k elseif k ~= EAGAIN then error(ffi.string(C.tbrt_link_why(b._l))) end
      end
      assert.equal(n, got)
      assert.is_nil(L.check(dst2, n, 6))
      assert(b:unregister(dst1))
      -- and the lender's send completes
      r, deadline = EAGAIN, os.time() + 10
      while r == EAGAIN and os.time() < deadline do
        C.tbrt_link_progress(b._l) ; C.tbrt_link_progress(a._l)
        r = tonumber(C.tbrt_link_send(a._l, src, n))
      end
      assert.equal(n, r)
      a:close() ; b:close()
    end))

  for _, k in ipairs({ { "tcp", { device = "tcp" } },
                       { "soft apple-uc (UC: no READs)", { device = "soft", personality = "apple-uc" } },
                       { "llama-linux framing", { device = "soft", personality = "linux-rc",
                                                  framing = "llama-linux" } } }) do
    it("on " .. k[1] .. " register is taken and sends stay on the link's own path",
      L.async(function()
        local a, b = L.pair(k[2])
        local n = 300 * 1024
        local src, dst = L.pattern(n, 4), ffi.new("uint8_t[?]", n)
        assert(a:register(src, n)) ; assert(b:register(dst, n))
        assert.equal(n, move(a, b, src, n, dst))
        assert.is_nil(L.check(dst, n, 4))
        assert.equal(0, a:stats().direct_sends) ; assert.equal(0, b:stats().direct_recvs)
        assert(a:unregister(src))
        a:close() ; b:close()
      end))
  end

  for _, h in ipairs({
    { "offer-key", "direct read completion" },
    { "offer-length", "a direct offer of 1073741825 bytes" },
    { "offer-wrap", "wraps the address space" },
    { "offer-twice", "a second direct offer before the first was read" },
  }) do
    it("a reader fails, naming it, on a hostile offer: " .. h[1], L.async(function()
      local a, b = L.pair(RC)
      local n = 65536
      local src, dst = L.pattern(n, 2), ffi.new("uint8_t[?]", n)
      assert(a:register(src, n)) ; assert(b:register(dst, n))
      assert.is_true(a:inject(h[1]))
      local t = task.spawn(function() return a:send(src, n, 2) end)
      local got, err = b:recv_into(dst, n, 5)
      if h[1] == "offer-twice" then
        -- what came before the failure is read first (the first offer),
        -- as with any failure; the next call names it
        assert.equal(n, got, err)
        got, err = b:recv_into(dst, n, 5)
      end
      assert.is_nil(got)
      assert.matches(h[2], err, 1, true)
      t:join(10)
      a:close() ; b:close()
    end))
  end

  -- A READ that fails at the lender is also what a lender that died gives
  -- (its memory went with it), and the device may see it before the
  -- bootstrap socket's EOF is read: the death is named, the device's word
  -- after it. (The lender's end of the socket shut without a goodbye is its
  -- death as the reader sees it.)
  it("a reader names a lender that died as the cause of a failed READ, the device's word after",
    L.async(function()
      local a, b = L.pair(RC)
      local n = 65536
      local src, dst = L.pattern(n, 2), ffi.new("uint8_t[?]", n)
      assert(a:register(src, n)) ; assert(b:register(dst, n))
      assert.is_true(a:inject("offer-key"))
      local t = task.spawn(function() return a:send(src, n, 2) end)
      local nfd, f0, f1 = a:_fds()
      assert.equal(0, ffi.C.shutdown(nfd == 2 and f1 or f0, 2))      -- SHUT_RDWR
      local got, err = b:recv_into(dst, n, 5)
      assert.is_nil(got)
      assert.matches("^ECONNRESET: link %d+: peer closed the bootstrap socket without saying " ..
        "goodbye %(peer process died%?%); the device had reported: direct read completion: " ..
        "IBV_WC_REM_ACCESS_ERR", err)
      t:join(10)
      a:close() ; b:close()
    end))

  it("a done frame that answers no offer fails its receiver, naming it", L.async(function()
    local a, b = L.pair(RC)
    assert.is_true(a:inject("stray-done"))
    local dst = ffi.new("uint8_t[8]")
    local got, err = b:recv_into(dst, 8, 5)
    assert.is_nil(got)
    assert.matches("a direct done frame (4096 bytes), but no send of ours is lent", err, 1, true)
    a:close() ; b:close()
  end))

  -- A direct send is a rendezvous (it returns once the peer's recv took
  -- it): two ends that both lend before reading would wait for each other,
  -- where the rings buffer sends from plain memory. The end with the lower
  -- QPN asks for its offer back and sends through the ring instead, so the
  -- exchange completes as one from plain memory does.
  for _, n in ipairs({ 64 * 1024, 1024 * 1024 }) do
    it("both ends sending before reading: " .. n / 1024 .. " KiB each way completes from plain "
      .. "and from registered memory, one offer taken back", L.async(function()
      for _, reg in ipairs({ false, true }) do
        local a, b = L.pair(RC)
        local function exchange(l, seed)
          local src = L.pattern(n, seed)
          if reg then assert(l:register(src, n)) end
          return task.spawn(function()
            local ok, err = l:send(src, n, 5)
            if not ok then return nil, err end
            assert(l:flush())
            local dst = ffi.new("uint8_t[?]", n)
            local got, err2 = l:recv_into(dst, n, 5)
            if got and L.check(dst, n, 11 - seed) then return nil, "the bytes differ" end
            return got, err2
          end)
        end
        local ta, tb = exchange(a, 4), exchange(b, 7)
        local ga, ea = ta:join(20)
        local gb, eb = tb:join(20)
        assert.equal(n, ga, ea) ; assert.equal(n, gb, eb)
        local da, db = a:stats().direct_sends, b:stats().direct_sends
        if reg then
          -- one end's offer was read, the other's given back and copied
          assert.same({ 0, 1 }, da < db and { da, db } or { db, da })
          assert.equal(n, a:stats().bytes_sent) ; assert.equal(n, b:stats().bytes_sent)
        else
          assert.equal(0, da + db)
        end
        -- and the links go on: direct again both ways, in turn
        if reg then
          local src = L.pattern(n, 9)
          assert(a:register(src, n))
          local dst = ffi.new("uint8_t[?]", n)
          assert(b:register(dst, n))
          assert.equal(n, move(a, b, src, n, dst))
          assert.is_nil(L.check(dst, n, 9))
          assert.equal(da + 1, a:stats().direct_sends)
        end
        a:close() ; b:close()
      end
    end))
  end

  it("both ends sending before reading, between two processes: the exchanges complete, "
    .. "with one offer of each taken back", L.async(function()
    local sizes = { 40000, 65536, 1000000 }
    local srv = assert(tbrt.listen("127.0.0.1", 0, RC))
    local args = { "exchange", srv.port, cjson.encode(RC) }
    for _, n in ipairs(sizes) do args[#args + 1] = n end
    local peer = L.spawn_peer(args)
    local l = assert(srv:accept(20))
    srv:close()
    for _, n in ipairs(sizes) do
      local src, dst = L.pattern(n, 4), ffi.new("uint8_t[?]", n)
      assert(l:register(src, n))
      local ok, err = l:send(src, n, 30)
      if not ok then
        local r = peer:wait(5)
        error(string.format("%s\n(peer: exit %s, stderr: %s)", err, tostring(r.code), r.stderr), 0)
      end
      assert(l:flush())
      assert.equal(n, l:recv_into(dst, n, 30))
      assert.is_nil(L.check(dst, n, 7), "the exchange of " .. n .. " bytes")
      assert(l:unregister(src))
    end
    local r = peer:wait(30)
    assert.equal(0, r.code, r.stderr)
    local theirs = tonumber(r.stdout:match("ok direct_sends (%d+)"))
    -- each exchange: one end's offer read, the other's given back
    assert.equal(#sizes, theirs + l:stats().direct_sends, r.stdout)
    assert(l:close())
  end))

  it("a lent send still waiting names the rendezvous when its timeout ends", L.async(function()
    local a, b = L.pair(RC)
    local n = 64 * 1024
    local src = L.pattern(n, 1)
    assert(a:register(src, n))
    local ok, err = a:send(src, n, 0.3)       -- b never reads
    assert.is_nil(ok)
    assert.matches("^ETIMEDOUT: link %d+: send: 65536 bytes lent to the peer %(a direct send " ..
      "from registered memory%) not read within 0%.3 s", err)
    assert.matches("read before sending, or send from unregistered memory", err, 1, true)
    a:close() ; b:close()
  end))

  it("between two processes (pair.lua --register) every byte checks and the sends go direct",
    function()
      -- the lending end helps with READs of 64 KiB or more only while it
      -- polls as the reader copies; on a loaded machine a run may miss it
      local out, rows, stats
      for _ = 1, 3 do
        local r = H.run(H.tbrt, { H.root .. "/scripts/pair.lua", "--personality", "linux-rc",
          "--register", "--sizes", "64K,1M,4M", "--iters", "30", "--test", "bw", "--json",
          "--stats", "--quiet" }, { timeout = 120 })
        assert.equal(0, r.code, r.stderr)
        out, rows, stats = r.stdout, 0, nil
        for line in out:gmatch("[^\n]+") do
          local ok, v = pcall(cjson.decode, line)
          if ok and type(v) == "table" then
            if v.stats then stats = v.stats elseif v.bw_push then rows = rows + 1 end
          end
        end
        assert.equal(3, rows, out)
        assert.is_table(stats, out)
        if stats.wire_pieces_helped > 0 and stats.wire_copies_shared > 0 then break end
      end
      -- pushes: the driver helped the peer read its memory; pulls: the peer helped it
      assert.is_true(stats.wire_pieces_helped > 0, out)
      assert.is_true(stats.wire_copies_shared > 0, out)
      -- each size's push and pull, warm-up included, every one direct
      assert.is_true(stats.direct_sends >= 3 * 30, out)
      assert.is_true(stats.direct_recvs >= 3 * 30, out)
      assert.is_true(stats.direct_bytes >= 30 * (64 * 1024 + 2 ^ 20 + 4 * 2 ^ 20), out)
    end)
end)
