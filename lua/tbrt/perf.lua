-- tbrt/perf.lua - measure a link: ping-pong latency with every iteration
-- timed, and streaming bandwidth both ways, with every byte of every
-- message checked; and the answering side, bounded against a hostile peer.
--
-- One side drives (perf.measure), the other answers (perf.serve). All
-- integers little-endian:
--   request  24 bytes  { magic "TBPF", op, size, count, seed, flags }
--   reply     8 bytes  { status (0: accepted), len } then len bytes of text
--   op 1 PINGPONG  count round trips of size bytes (the server echoes)
--   op 2 PUSH      count messages driver -> server, then a 1-byte ack
--   op 3 PULL      count messages server -> driver, then a 1-byte ack
--   op 0 DONE      no reply; serve returns
-- Message i of a request starts with its index (8 bytes) and continues
-- with a pattern from the seed (xorshift32's bytes, flag XORSHIFT);
-- receivers compare every byte (memcmp speed; from 64 KiB on, each piece
-- as it arrives), so a lost, repeated or corrupted byte fails the run with
-- its position.
--
-- What a peer may ask is bounded before anything is done for it: size
-- 1..MAX_SIZE, count 1..MAX_COUNT; a refusal goes back in the reply (the
-- driver raises it) and is the error serve returns. A size's buffers are
-- allocated only once the first bytes of its data have arrived (PINGPONG,
-- PUSH), so a request alone never costs memory, and at most one size is
-- kept (2 x MAX_SIZE bytes).
local bit = require("bit")
local ffi = require("ffi")
local link = require("tbrt.link")
local stats = require("tbrt.perf.stats")

ffi.cdef [[ int memcmp(const void *a, const void *b, size_t n); ]]
local C = ffi.C
local band, bnot, bxor, lshift, rshift = bit.band, bit.bnot, bit.bxor, bit.lshift, bit.rshift
local now = link.now

local M = {}

-- The largest message the answering end serves: the top of pair.lua's test
-- plan (1 B .. 16 MiB, the largest message a TN3205 link carries whole is
-- 16,773,120 bytes; the link streams larger ones, so 16 MiB is a round cap).
M.MAX_SIZE = 16 * 2 ^ 20
-- The most messages one request may ask for (warm-up included), so the
-- work a request starts stays finite; pair.lua's --iters and --warmup are
-- each at most half of it.
M.MAX_COUNT = 20000000
M.MAX_ITERS = M.MAX_COUNT / 2

local PINGPONG, PUSH, PULL, DONE = 1, 2, 3, 0
local OP_NAME = { [PINGPONG] = "PINGPONG", [PUSH] = "PUSH", [PULL] = "PULL", [DONE] = "DONE" }
local MAGIC = 0x46504254                -- "TBPF" in memory
-- flags: REGISTER asks the answering end to register its buffers with the
-- link (link:register), as the driver did: large messages then go direct;
-- XORSHIFT says the messages carry the xorshift pattern (below). A peer
-- that does not know a flag refuses the request, naming it.
local REQ = ffi.typeof("struct { uint32_t magic, op, size, count, seed, flags; }")
local REGISTER, XORSHIFT = 1, 2
local REQ_SIZE = ffi.sizeof(REQ)
local REPLY = ffi.typeof("struct { uint32_t status, len; }")
local REPLY_SIZE = ffi.sizeof(REPLY)
-- Longest refusal text either side sends or reads.
local MAX_TEXT = 512
local U32 = 4294967296

local function human(n)
  if n >= 2 ^ 20 and n % 2 ^ 20 == 0 then return (n / 2 ^ 20) .. " MiB" end
  if n >= 1024 and n % 1024 == 0 then return (n / 1024) .. " KiB" end
  return n .. " B"
end
M.human = human

-- A buffer of n bytes (at least 8, so the index always fits): pattern from
-- seed; the index is stamped per message. xorshift: the low byte of each
-- step of xorshift32 (every byte value, a period of 2^32 - 1). Without it,
-- the pattern of pair.lua before it (an LCG in doubles, whose products
-- lose their low bits: 21 byte values; still what a peer that does not
-- say XORSHIFT sends and expects).
local function pattern(n, seed, xorshift)
  local b = ffi.new("uint8_t[?]", math.max(n, 8))
  local x = seed
  if xorshift then
    x = bit.tobit(x)
    for i = 0, n - 1 do
      x = bxor(x, lshift(x, 13))
      x = bxor(x, rshift(x, 17))
      x = bxor(x, lshift(x, 5))
      b[i] = band(x, 255)
    end
    return b
  end
  for i = 0, n - 1 do
    x = (x * 1103515245 + 12345) % 2147483648
    b[i] = x % 256
  end
  return b
end

-- Message buffers for one size: want (the pattern), msg (what arrives),
-- and 32-bit views of their first 8 bytes. The index is written and read
-- as two 32-bit words: a 64-bit read outside compiled code would allocate.
local function buffers(n, seed, xorshift)
  local want, msg = pattern(n, seed, xorshift), ffi.new("uint8_t[?]", math.max(n, 8))
  return { size = n, seed = seed, xorshift = xorshift, want = want, msg = msg,
    want32 = ffi.cast("uint32_t *", want), msg32 = ffi.cast("uint32_t *", msg) }
end

local function stamp(b, n, i)
  if n >= 8 then
    b.want32[0] = i % U32
    b.want32[1] = math.floor(i / U32)
  end
end

-- Message i (n bytes, in b.msg) does not carry its index: why, or nil.
local function index_differs(b, n, i)
  if n < 8 then return nil end
  local lo, hi = b.msg32[0], b.msg32[1]
  if lo ~= i % U32 or hi ~= math.floor(i / U32) then
    return string.format("message %d carries index %.0f (lost or repeated?)", i, lo + hi * U32)
  end
end

-- Where message i (n bytes, in b.msg) differs from the pattern, or nil.
local function differs(b, n, i)
  local bad = index_differs(b, n, i)
  if bad then return bad end
  local msg, want = b.msg, b.want
  local from = n >= 8 and 8 or 0
  if C.memcmp(msg + from, want + from, n - from) == 0 then return nil end
  for k = from, n - 1 do
    if msg[k] ~= want[k] then
      return string.format("message %d byte %d is 0x%02x, expected 0x%02x", i, k, msg[k], want[k])
    end
  end
end

local function send(l, buf, n)
  local ok, err = l:send(buf, n)
  if not ok then error(err, 0) end
  ok, err = l:flush()
  if not ok then error(err, 0) end
end

local function recv(l, buf, n, timeout)
  local got, err = l:recv_into(buf, n, timeout)
  if not got then error(err, 0) end
end

-- Messages from this size on are checked piece by piece (below).
local PIECES_FROM = 65536

-- Receive message i (its first `have` bytes, at most 8, are in b.msg
-- already) and check it. A large one is checked piece by piece as it
-- arrives, while each piece is still in this CPU's cache (a second pass
-- over a whole 4 MiB message after its last byte came is a read from
-- memory, which cost a stream up to a third of its figure); the index
-- (bytes 0..7) once all came. A small one whole, in one call: a loop here
-- would be a trace of its own that a ping-pong leaves every message.
local function expect(l, b, n, i, timeout, who, have)
  have = have or 0
  local bad
  if n < PIECES_FROM then
    if n > have then recv(l, b.msg + have, n - have, timeout) end
    bad = differs(b, n, i)
  else
    local msg, want = b.msg, b.want
    local done, same = have, true
    while done < n do
      local got, err = l:recv_into(msg + done, n - done, timeout, true)
      if not got then error(err, 0) end
      local a, e = done > 8 and done or 8, done + got
      if e > a and same then same = C.memcmp(msg + a, want + a, e - a) == 0 end
      done = e
    end
    bad = index_differs(b, n, i) or (not same and differs(b, n, i))
  end
  if bad then error(string.format("EBADMSG: %s: %d-byte %s", who, n, bad), 0) end
end

---------------------------------------------------------------------------
-- The answering side.

-- Why a request cannot be served (a text starting with an errno name), or nil.
local function refusal(op, n, count, max_size, flags)
  if not OP_NAME[op] then
    return string.format("EPROTO: perf: unknown request op %d (a newer or foreign peer?)", op)
  end
  if band(flags, bnot(REGISTER + XORSHIFT)) ~= 0 then
    return string.format("EPROTO: perf: unknown request flags 0x%x (a newer or foreign peer?)",
      flags)
  end
  if n < 1 or n > max_size then
    return string.format("EMSGSIZE: perf: %s of %s messages refused: sizes go from 1 B to %s " ..
      "(perf.MAX_SIZE)", OP_NAME[op], n .. " B", human(max_size))
  end
  if count < 1 or count > M.MAX_COUNT then
    return string.format("EINVAL: perf: %s of %d messages refused: counts go from 1 to %d " ..
      "(perf.MAX_COUNT)", OP_NAME[op], count, M.MAX_COUNT)
  end
end

local function reply(l, text)
  local r = REPLY()
  if text then
    text = text:sub(1, MAX_TEXT)
    r.status, r.len = 1, #text
  end
  local ok, err = l:send(r, REPLY_SIZE)
  if ok and text then ok, err = l:send(text) end
  if ok then ok, err = l:flush() end
  return ok, err
end

-- Answer requests until DONE. opts: timeout (of every wait, 60 s; a number
-- alone is taken as it), max_size (MAX_SIZE). Returns { requests, bytes }
-- (what was served), or nil, err: the link's error, a message that did not
-- match, a refused request (also sent to the peer) or a malformed one.
function M.serve(l, opts)
  if type(opts) ~= "table" then opts = { timeout = opts } end
  local timeout = opts.timeout or 60
  local max_size = math.min(opts.max_size or M.MAX_SIZE, M.MAX_SIZE)
  local req = REQ()
  local head = ffi.new("uint8_t[8]")   -- the first bytes of a size's first message
  local b                              -- the buffers of the size served last
  local served = { requests = 0, bytes = 0 }
  local function unregister()
    if b and b.reg then
      l:unregister(b.want)
      l:unregister(b.msg)
      b.reg = nil
    end
  end
  local function buffers_for(n, seed, reg, xorshift)
    if not b or b.size ~= n or b.seed ~= seed or b.xorshift ~= xorshift then
      -- the old size's buffers go first, so no more than one size is held
      local big = b and b.size >= 2 ^ 20
      unregister()
      b = nil
      if big then collectgarbage() end
      b = buffers(n, seed, xorshift)
    end
    if reg and not b.reg then
      local rok, rerr = l:register(b.want, b.size)
      if rok then rok, rerr = l:register(b.msg, b.size) end
      if not rok then error(rerr, 0) end
      b.reg = true
    elseif not reg then
      unregister()
    end
    return b
  end
  local ok, err = pcall(function()
    while true do
      recv(l, req, REQ_SIZE, timeout)
      -- one copy of the peer's words, read once
      local magic, op, n, count, seed, flags = req.magic, req.op, req.size, req.count, req.seed,
        req.flags
      if magic ~= MAGIC then
        error(string.format("EPROTO: perf: request magic 0x%08x is not TBPF (not a pair.lua " ..
          "peer, or the stream is out of step)", magic), 0)
      end
      if op == DONE then return end
      local why = refusal(op, n, count, max_size, flags)
      local reg, xorshift = band(flags, REGISTER) ~= 0, band(flags, XORSHIFT) ~= 0
      if why then
        reply(l, why)
        error(why, 0)
      end
      local rok, rerr = reply(l, nil)
      if not rok then error(rerr, 0) end
      served.requests = served.requests + 1
      served.bytes = served.bytes + n * count
      if op == PINGPONG or op == PUSH then
        -- nothing is allocated until the data comes
        local k = math.min(n, 8)
        recv(l, head, k, timeout)
        local buf = buffers_for(n, seed, reg, xorshift)
        ffi.copy(buf.msg, head, k)
        local who = op == PINGPONG and "serve pingpong" or "serve push"
        -- a loop of its own for each op: LuaJIT made one loop that tested
        -- op in its body take 76-87 ns a message of a push of 8 B ones,
        -- against the driver's ~40 for the same expect(), so the "->"
        -- rate read about half the "<-" one
        expect(l, buf, n, 0, timeout, who, k)
        if op == PINGPONG then
          send(l, buf.msg, n)
          for i = 1, count - 1 do
            expect(l, buf, n, i, timeout, who)
            send(l, buf.msg, n)
          end
        else
          for i = 1, count - 1 do expect(l, buf, n, i, timeout, who) end
        end
        if op == PUSH then send(l, "\1", 1) end
      else
        local buf = buffers_for(n, seed, reg, xorshift)
        for i = 0, count - 1 do
          stamp(buf, n, i)
          local sok, serr = l:send(buf.want, n)
          if not sok then error(serr, 0) end
        end
        send(l, "", 0)
        recv(l, buf.msg, 1, timeout)
      end
    end
  end)
  if l._l then pcall(unregister) end
  if not ok then return nil, err end
  return served
end

---------------------------------------------------------------------------
-- The driving side.

-- How many messages of n bytes make a fair measurement: about `budget`
-- bytes, within [lo, hi].
local function count_for(n, budget, lo, hi)
  local c = math.floor(budget / math.max(n, 1))
  return math.max(lo, math.min(hi, c))
end
M.count_for = count_for

-- Default counts per size. Latency: 1000 round trips (enough for a p99.9)
-- up to 256 KiB, then about 256 MiB worth, at least 20; its warm-up a
-- tenth of that, 1..100. Bandwidth: about 256 MiB worth, 5..20000; its
-- warm-up about 4 MiB worth, at least 2.
function M.lat_iters(n) return count_for(n, 256 * 2 ^ 20, 20, 1000) end
function M.lat_warmup(iters) return math.max(1, math.min(100, math.ceil(iters / 10))) end
function M.bw_iters(n) return count_for(n, 256 * 2 ^ 20, 5, 20000) end
function M.bw_warmup(n, iters) return math.max(2, math.min(iters, math.floor(4 * 2 ^ 20 / math.max(n, 1)))) end

-- Timestamps of the latency loop, kept between sizes (grown when needed),
-- so the loop itself allocates nothing.
local ts_buf, ts_len = nil, 0
local function timestamps(n)
  if n > ts_len then
    ts_buf, ts_len = ffi.new("double[?]", n), n
  end
  return ts_buf
end

-- Send a request and wait for its reply; a refusal is raised.
local function request(l, req, op, n, count, seed, timeout, flags)
  req.magic, req.op, req.size, req.count, req.seed, req.flags = MAGIC, op, n, count, seed,
    flags or 0
  send(l, req, REQ_SIZE)
  local r = REPLY()
  recv(l, r, REPLY_SIZE, timeout)
  local status, len = r.status, r.len
  if status == 0 then return end
  if len > MAX_TEXT then
    error(string.format("EPROTO: perf: the answering end refused %s with a %d-byte reason " ..
      "(more than %d: not a pair.lua peer?)", OP_NAME[op], len, MAX_TEXT), 0)
  end
  local text = len > 0 and ffi.new("char[?]", len)
  if text then recv(l, text, len, timeout) end
  error("the answering end refused: " .. (text and ffi.string(text, len) or "(no reason given)"), 0)
end

-- Measure one size. opts: iters (timed messages per test), warmup (untimed
-- ones before them), timeout, lat_only / bw_only, flush_each, register
-- (both ends' buffers registered with the link: large messages go direct,
-- the peer reading them). Returns the
-- row (what pair.lua --json prints):
--   size, messages (timed, both tests, both ways)
--   lat_iters, lat_warmup, lat_{min,typical,mean,p99,p99_9,max,stdev}_us
--     one-way latency (half of each round trip), per iteration
--   bw_iters, bw_warmup, bw_push, bw_pull (GB/s), msg_rate_push, msg_rate_pull
--     (messages/s); push: this side sends, pull: it receives
-- Errors (a link error, a message that does not match, a refusal) are raised.
function M.measure(l, n, opts)
  opts = opts or {}
  local timeout = opts.timeout or 60
  local seed = (n * 2654435761) % 2147483648 + 1
  local b = buffers(n, seed, true)
  local req = REQ()
  local row = { size = n, messages = 0 }
  local flags = XORSHIFT + (opts.register and REGISTER or 0)
  if opts.register then
    local ok, err = l:register(b.want, n)
    if ok then ok, err = l:register(b.msg, n) end
    if not ok then error(err, 0) end
  end
  if not opts.bw_only then
    local count = opts.iters or M.lat_iters(n)
    local warm = opts.warmup or M.lat_warmup(count)
    local ts = timestamps(count + 1)
    request(l, req, PINGPONG, n, warm + count, seed, timeout, flags)
    for i = 0, warm + count - 1 do
      if i >= warm then ts[i - warm] = now() end
      stamp(b, n, i)
      send(l, b.want, n)
      expect(l, b, n, i, timeout, "pingpong")
    end
    ts[count] = now()
    local s = stats.from_timestamps(ts, count, 0.5 * 1e6)
    row.lat_iters, row.lat_warmup = count, warm
    row.lat_min_us, row.lat_typical_us, row.lat_mean_us = s.min, s.typical, s.mean
    row.lat_p99_us, row.lat_p99_9_us, row.lat_max_us, row.lat_stdev_us = s.p99, s.p99_9, s.max, s.stdev
    row.messages = row.messages + 2 * count
  end
  if not opts.lat_only then
    local count = opts.iters or M.bw_iters(n)
    -- an untimed stream each way first: page faults and first touches of
    -- the rings (the other end maps them too) belong to set-up
    local warm = opts.warmup or M.bw_warmup(n, count)
    local function push(c)
      request(l, req, PUSH, n, c, seed, timeout, flags)
      for i = 0, c - 1 do
        stamp(b, n, i)
        local ok, err = l:send(b.want, n)
        if not ok then error(err, 0) end
        if opts.flush_each then l:flush() end
      end
      send(l, "", 0)
      recv(l, b.msg, 1, timeout)
    end
    local function pull(c)
      request(l, req, PULL, n, c, seed, timeout, flags)
      for i = 0, c - 1 do expect(l, b, n, i, timeout, "pull") end
      send(l, "\1", 1)
    end
    if warm > 0 then push(warm) pull(warm) end
    local t0 = now()
    push(count)
    local dt = now() - t0
    row.bw_push, row.msg_rate_push = count * n / dt / 1e9, count / dt
    t0 = now()
    pull(count)
    dt = now() - t0
    row.bw_pull, row.msg_rate_pull = count * n / dt / 1e9, count / dt
    row.bw_iters, row.bw_warmup = count, warm
    row.messages = row.messages + 2 * count
  end
  if opts.register then
    l:unregister(b.want)
    l:unregister(b.msg)
  end
  return row
end

function M.done(l)
  local req = REQ()
  req.magic, req.op = MAGIC, DONE
  send(l, req, REQ_SIZE)
end

M.DEFAULT_SIZES = { 1, 8, 64, 512, 4096, 32768, 131072, 1048576, 4194304, 16777216 }

local UNIT = { [""] = 1, k = 1024, K = 1024, m = 2 ^ 20, M = 2 ^ 20, g = 2 ^ 30, G = 2 ^ 30 }

-- One size ("4K", "64KiB", "16M", "130000"): bytes, or nil, why.
function M.parse_size(item)
  local num, unit = item:match("^(%d+)([KkMmGg]?)i?[Bb]?$")
  if not num then return nil, "'" .. item .. "' is not a size (use e.g. 1, 4K, 64KiB, 16M)" end
  return tonumber(num) * UNIT[unit]
end

-- "1,4K,64KiB,16M" -> { 1, 4096, 65536, 16777216 }, each 1 B .. max
-- (MAX_SIZE), or nil, why.
function M.parse_sizes(s, max)
  max = max or M.MAX_SIZE
  local out = {}
  for item in s:gmatch("[^,%s]+") do
    local v, why = M.parse_size(item)
    if not v then return nil, why end
    if v < 1 or v > max then
      return nil, string.format("size %s is out of range: sizes go from 1 B to %s", item, human(max))
    end
    out[#out + 1] = v
  end
  if #out == 0 then return nil, "no sizes given (use e.g. 1,4K,64K,16M)" end
  return out
end

return M
