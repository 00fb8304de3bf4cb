-- perf_spec.lua - tbrt.perf against a hostile peer and as a latency meter:
-- serve refuses a request over its documented limits at once (telling the
-- peer why), allocates nothing before data arrives, stops at a bad magic;
-- measure times every iteration (one slow round trip shows in max and p99,
-- not in the typical figure); the statistics are perftest's.
local ffi = require("ffi")
local tbrt = require("tbrt")
local task = require("tbrt.task")
local perf = require("tbrt.perf")
local L = require("links")

local REQ = ffi.typeof("struct { uint32_t magic, op, size, count, seed, flags; }")
local MAGIC = 0x46504254
local PINGPONG, PUSH = 1, 2

-- Resident memory of this process, bytes.
local function rss()
  local f = assert(io.open("/proc/self/statm"))
  local pages = f:read("*n") and f:read("*n")
  f:close()
  return pages * 4096
end

local function request(l, op, size, count, magic, flags)
  local r = REQ()
  r.magic, r.op, r.size, r.count, r.seed, r.flags = magic or MAGIC, op, size, count, 7, flags or 0
  assert(l:send(r, ffi.sizeof(REQ)))
  assert(l:flush())
end

-- The reply to a request: status, text.
local function reply(l)
  local r = ffi.new("uint32_t[2]")
  assert(l:recv_into(r, 8, 5))
  local text = r[1] > 0 and assert(l:recv(r[1], 5)) or ""
  return r[0], text
end

-- A link pair over tcp with perf.serve running on b (as `server`, a task).
local function serving(opts)
  local a, b = L.pair({ device = "tcp" })
  assert(a and b)
  local server = task.spawn(function() return perf.serve(b, opts or { timeout = 5 }) end)
  return a, b, server
end

describe("perf.serve against a hostile peer", function()
  it("refuses a size over perf.MAX_SIZE at once, tells the peer, allocates nothing", L.async(function()
    local a, b, server = serving()
    local before, t0 = rss(), tbrt.now()
    request(a, PINGPONG, 0xffffffff, 1)
    local status, text = reply(a)
    assert.equal(1, status)
    assert.equal("EMSGSIZE: perf: PINGPONG of 4294967295 B messages refused: sizes go from 1 B to " ..
      "16 MiB (perf.MAX_SIZE)", text)
    local ok, err = server:join(5)
    assert.is_nil(ok)
    assert.equal(text, err)
    assert.is_true(tbrt.now() - t0 < 1, "refused within a second")
    assert.is_true(rss() - before < 32 * 2 ^ 20, "no large allocation")
    assert.equal(16 * 2 ^ 20, perf.MAX_SIZE)
    a:close() b:close()
  end))

  it("refuses a count of 0 or over perf.MAX_COUNT, and an unknown op", L.async(function()
    for _, c in ipairs({ { PUSH, 64, 0, "^EINVAL: perf: PUSH of 0 messages refused: counts go from 1 to 20000000" },
        { PUSH, 64, perf.MAX_COUNT + 1, "^EINVAL: perf: PUSH of 20000001 messages refused" },
        { 9, 64, 1, "^EPROTO: perf: unknown request op 9" } }) do
      local a, b, server = serving()
      request(a, c[1], c[2], c[3])
      local status, text = reply(a)
      assert.equal(1, status)
      assert.matches(c[4], text)
      assert.matches(c[4], select(2, server:join(5)))
      a:close() b:close()
    end
  end))

  it("takes the xorshift pattern when asked, the old one from an older peer, and no other flag",
    L.async(function()
      local bit = require("bit")
      -- message 0 of seed 7: its index (8 zero bytes), then the pattern
      local function message(n, xorshift)
        local m, x = ffi.new("uint8_t[?]", n), 7
        for i = 0, n - 1 do
          if xorshift then
            x = bit.bxor(x, bit.lshift(x, 13))
            x = bit.bxor(x, bit.rshift(x, 17))
            x = bit.bxor(x, bit.lshift(x, 5))
            m[i] = bit.band(x, 255)
          else
            x = (x * 1103515245 + 12345) % 2147483648
            m[i] = x % 256
          end
        end
        ffi.fill(m, 8, 0)
        return m
      end
      -- xorshift's bytes: every value, and no word alike in 64 KiB
      local m, seen, words = message(65536, true), {}, {}
      for i = 8, 65535 do seen[m[i]] = true end
      local distinct = 0
      for _ in pairs(seen) do distinct = distinct + 1 end
      assert.equal(256, distinct)
      local w = ffi.cast("uint64_t *", m)
      for i = 1, 8191 do
        local k = tostring(w[i])
        assert.is_nil(words[k], "word " .. i .. " repeats")
        words[k] = true
      end
      for _, c in ipairs { { 2, true, "served" }, { 0, false, "served" },
          { 2, false, "^EBADMSG: serve push: 4096%-byte message 0 byte 8 is" },
          { 4, true, "^EPROTO: perf: unknown request flags 0x4 %(a newer or foreign peer%?%)" } } do
        local a, b, server = serving()
        request(a, PUSH, 4096, 1, nil, c[1])
        local status, text = reply(a)
        if c[1] == 4 then
          assert.equal(1, status)
          assert.matches(c[3], text)
        else
          assert.equal(0, status, text)
          assert(a:send(message(4096, c[2]), 4096)) ; assert(a:flush())
          if c[3] == "served" then
            assert.equal("\1", a:recv(1, 5))
            local done = ffi.new("uint32_t[6]", { MAGIC, 0 })      -- op 0: DONE
            assert(a:send(done, ffi.sizeof(REQ))) ; assert(a:flush())
            assert.same({ requests = 1, bytes = 4096 }, server:join(5))
          else
            local ok, err = server:join(5)
            assert.is_nil(ok)
            assert.matches(c[3], err)
          end
        end
        a:close() b:close()
      end
    end))

  it("allocates a size's buffers only once its data arrives", L.async(function()
    local a, b, server = serving()
    local n = perf.MAX_SIZE
    collectgarbage()
    local before = rss()
    request(a, PUSH, n, 1)
    assert.equal(0, (reply(a)))
    task.sleep(0.3)                     -- the server waits for the data now
    local waiting = rss() - before
    assert.is_true(waiting < 8 * 2 ^ 20, string.format("%.1f MiB before any data", waiting / 2 ^ 20))
    -- a peer that sends a little and then goes costs no more than it sent
    assert(a:send(string.rep("\0", 8))) ; assert(a:flush())
    a:close()
    local ok, err = server:join(10)
    assert.is_nil(ok)
    assert.matches("^EOF: link %d+: the peer closed the link", err)
    b:close()
  end))

  it("spends nothing on the 16 bytes that once cost 4 GiB and 45 s of CPU", L.async(function()
    -- the old request { op = PINGPONG, size = 2 GiB - 16, count, seed }, then silence: the old
    -- serve allocated (and patterned) both 2 GiB buffers for it before any data came
    local a, b, server = serving()
    local before, t0 = rss(), tbrt.now()
    local old = ffi.new("uint32_t[4]", { PINGPONG, 0x7ffffff0, 1, 1 })
    assert(a:send(old, 16)) ; assert(a:flush())
    task.sleep(0.3)
    assert.is_true(rss() - before < 8 * 2 ^ 20, "no allocation for it")
    assert(a:send(string.rep("\0", 8))) ; assert(a:flush())   -- the rest of a 24-byte request
    local ok, err = server:join(5)
    assert.is_nil(ok)
    assert.matches("^EPROTO: perf: request magic 0x00000001 is not TBPF", err)
    assert.is_true(tbrt.now() - t0 < 2)
    a:close() b:close()
  end))

  it("ends at a request without the magic, naming what came", L.async(function()
    local a, b, server = serving()
    request(a, PINGPONG, 8, 1, 0x20544547)
    local ok, err = server:join(5)
    assert.is_nil(ok)
    assert.matches("^EPROTO: perf: request magic 0x20544547 is not TBPF", err)
    a:close() b:close()
  end))

  it("serves a well-formed run and says what it served", L.async(function()
    local a, b, server = serving()
    local row = perf.measure(a, 4096, { iters = 20, warmup = 2 })
    perf.done(a)
    local served = assert(server:join(10))
    assert.equal(5, served.requests)       -- PINGPONG; PUSH, PULL warm-up; PUSH, PULL
    assert.equal(20, row.lat_iters)
    a:close() b:close()
  end))
end)

describe("perf.measure latency", function()
  -- b as perf.serve sees it, with the echo of one message held back
  local function slow_echo(b, size, which, delay)
    local sends = 0
    return setmetatable({}, { __index = function(_, k)
      local v = b[k]
      if type(v) ~= "function" then return v end
      return function(_, buf, n, ...)
        if k == "send" and n == size then
          sends = sends + 1
          if sends == which then task.sleep(delay) end
        end
        return v(b, buf, n, ...)
      end
    end })
  end

  it("times every iteration: one slow round trip shows in max and p99, not typical", L.async(function()
    local a, b = L.pair({ device = "tcp" })
    local warm, iters = 5, 50
    local server = task.spawn(perf.serve, slow_echo(b, 64, warm + 10, 0.05), { timeout = 5 })
    local row = perf.measure(a, 64, { iters = iters, warmup = warm, lat_only = true })
    perf.done(a)
    assert(server:join(5))
    assert.equal(iters, row.lat_iters)
    assert.equal(warm, row.lat_warmup)
    assert.equal(2 * iters, row.messages)
    assert.is_true(row.lat_max_us >= 25000, "max " .. row.lat_max_us)   -- half of 50 ms
    assert.equal(row.lat_max_us, row.lat_p99_us)                        -- 50 samples: p99 is the max
    assert.is_true(row.lat_typical_us < 10000, "typical " .. row.lat_typical_us)
    assert.is_true(row.lat_min_us <= row.lat_typical_us and row.lat_typical_us < row.lat_mean_us)
    assert.is_true(row.lat_stdev_us > 1000, "stdev " .. row.lat_stdev_us)
    a:close() b:close()
  end))

  it("checks every byte of every echo", L.async(function()
    local a, b = L.pair({ device = "tcp" })
    -- an echo that flips one byte of the 3rd message
    local sends = 0
    local bad = setmetatable({}, { __index = function(_, k)
      local v = b[k]
      if type(v) ~= "function" then return v end
      return function(_, buf, n, ...)
        if k == "send" and n == 100 then
          sends = sends + 1
          if sends == 3 then ffi.cast("uint8_t *", buf)[77] = 0x5a end
        end
        return v(b, buf, n, ...)
      end
    end })
    local server = task.spawn(perf.serve, bad, { timeout = 5 })
    local ok, err = pcall(perf.measure, a, 100, { iters = 10, warmup = 0, lat_only = true })
    assert.is_false(ok)
    assert.matches("^EBADMSG: pingpong: 100%-byte message 2 byte 77 is 0x5a, expected 0x%x%x", err)
    a:close() b:close()
    server:join(5)
  end))

  it("checks every byte of a pushed stream, piece by piece, naming the byte", L.async(function()
    -- soft: a 1 MiB message comes in strides (pieces); the 3rd message has
    -- one byte flipped deep in a later piece
    local a, b = L.pair({ device = "soft" })
    local MIB, AT = 1048576, 300001
    local sends = 0
    local bad = setmetatable({}, { __index = function(_, k)
      local v = a[k]
      if type(v) ~= "function" then return v end
      return function(_, buf, n, ...)
        if k ~= "send" or n ~= MIB then return v(a, buf, n, ...) end
        sends = sends + 1
        if sends ~= 3 then return v(a, buf, n, ...) end
        local p = ffi.cast("uint8_t *", buf)
        local was = p[AT]
        p[AT] = 255 - was
        local r1, r2 = v(a, buf, n, ...)        -- (the bytes are copied once it returns)
        p[AT] = was
        return r1, r2
      end
    end })
    local server = task.spawn(perf.serve, b, { timeout = 5 })
    local ok = pcall(perf.measure, bad, MIB, { iters = 4, warmup = 0, bw_only = true, timeout = 3 })
    assert.is_false(ok)
    local served, err = server:join(10)
    assert.is_nil(served)
    assert.matches("^EBADMSG: serve push: 1048576%-byte message 2 byte 300001 is 0x%x%x, " ..
      "expected 0x%x%x", err)
    a:close() b:close()
  end))
end)

describe("perf.stats", function()
  it("gives perftest's figures: median, nearest-rank percentiles, population stdev", function()
    local stats = require("tbrt.perf.stats")
    local s = {}
    for i = 100, 1, -1 do s[#s + 1] = i end
    local r = stats.summarize(s)
    assert.same({ n = 100, min = 1, typical = 50.5, mean = 50.5, p99 = 99, p99_9 = 100, max = 100 },
      { n = r.n, min = r.min, typical = r.typical, mean = r.mean, p99 = r.p99, p99_9 = r.p99_9, max = r.max })
    assert.near(math.sqrt((100 * 100 - 1) / 12), r.stdev, 1e-9)
    r = stats.summarize({ 3, 1, 2 })
    assert.equal(2, r.typical)
    assert.equal(3, r.p99)
    r = stats.summarize({ 5 })
    assert.same({ 5, 5, 5, 5, 5, 0 }, { r.min, r.typical, r.max, r.p99, r.p99_9, r.stdev })
    assert.is_nil(stats.summarize({}))
    local ts = ffi.new("double[4]", { 0, 1, 3, 6 })
    r = stats.from_timestamps(ts, 3, 0.5)
    assert.same({ 0.5, 1, 1.5 }, { r.min, r.typical, r.max })
  end)

  it("takes a timestamp per iteration without allocating in the loop", function()
    -- a link that answers in place (no waiting): what measure itself costs
    local q = ffi.new("uint8_t[?]", 65536)
    local head, tail = 0, 0
    local zero = ffi.new("uint8_t[8]")
    local fake = {}
    function fake.send(_, buf, n)
      local p = ffi.cast("const uint8_t *", buf)
      if n == 24 and ffi.cast("const uint32_t *", p)[0] == MAGIC then p, n = zero, 8 end
      ffi.copy(q + tail, p, n)
      tail = tail + n
      return n
    end
    function fake.flush() return true end
    function fake.recv_into(_, buf, n)
      ffi.copy(buf, q + head, n)
      head = head + n
      if head == tail then head, tail = 0, 0 end
      return n
    end
    local function cost(iters)
      perf.measure(fake, 64, { iters = iters, warmup = 0, lat_only = true })   -- warm (JIT)
      collectgarbage() collectgarbage("stop")
      local before = collectgarbage("count")
      perf.measure(fake, 64, { iters = iters, warmup = 0, lat_only = true })
      local kb = collectgarbage("count") - before
      collectgarbage("restart")
      return kb
    end
    local small, big = cost(2000), cost(22000)
    -- the statistics keep a number per sample (a Lua table, after the loop):
    -- at most ~16 bytes each; anything in the loop would add more
    local per_iter = (big - small) * 1024 / 20000
    assert.is_true(per_iter < 40, string.format("%.1f bytes per iteration", per_iter))
  end)
end)
