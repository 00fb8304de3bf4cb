-- tbrt/perf.lua - measure a link: ping-pong latency and streaming bandwidth
-- both ways, with every byte of every message checked.
--
-- One side drives (perf.drive), the other answers (perf.serve). The driver
-- sends a 16-byte request {op, size, count, seed} and then the data:
--   op 1 PINGPONG  count round trips of size bytes (the server echoes)
--   op 2 PUSH      count messages driver -> server, then a 1-byte ack
--   op 3 PULL      count messages server -> driver, then a 1-byte ack
--   op 0 DONE
-- Message i of a run starts with its index (8 bytes) and continues with a
-- pattern from the seed; receivers compare the whole message (memcmp speed),
-- so a lost, repeated or corrupted byte fails the run with its position.
local ffi = require("ffi")
local link = require("tbrt.link")

ffi.cdef [[ int memcmp(const void *a, const void *b, size_t n); ]]
local C = ffi.C
local now = link.now

local M = {}
local PINGPONG, PUSH, PULL, DONE = 1, 2, 3, 0
local REQ = ffi.typeof("struct { uint32_t op, size, count, seed; }")
local REQ_SIZE = ffi.sizeof(REQ)

-- A buffer of n bytes: pattern from seed (index stamped per message later).
local function pattern(n, seed)
  local b = ffi.new("uint8_t[?]", math.max(n, 8))
  local x = seed
  for i = 0, n - 1 do
    x = (x * 1103515245 + 12345) % 2147483648
    b[i] = x % 256
  end
  return b
end

local function stamp(buf, n, i)
  if n >= 8 then ffi.cast("uint64_t *", buf)[0] = i end
end

-- Where msg (n bytes, message i) differs from the pattern, or nil.
local function differs(msg, want, n, i)
  if n >= 8 then
    if ffi.cast("uint64_t *", msg)[0] ~= i then
      return string.format("message %d carries index %s (lost or repeated?)", i,
        tostring(ffi.cast("uint64_t *", msg)[0]))
    end
    if C.memcmp(msg + 8, want + 8, n - 8) == 0 then return nil end
  elseif C.memcmp(msg, want, n) == 0 then
    return nil
  end
  for k = (n >= 8 and 8 or 0), n - 1 do
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

local function expect(l, buf, want, n, i, timeout, who)
  recv(l, buf, n, timeout)
  local bad = differs(buf, want, n, i)
  if bad then error(string.format("EBADMSG: %s: %d-byte %s", who, n, bad), 0) end
end

-- Answer requests until DONE. Returns true, or nil, err.
function M.serve(l, timeout)
  timeout = timeout or 60
  local req = REQ()
  local bufs = {}
  local function buffers(size, seed)
    local b = bufs[size]
    if not b or b.seed ~= seed then
      b = { want = pattern(size, seed), msg = ffi.new("uint8_t[?]", math.max(size, 8)), seed = seed }
      bufs = { [size] = b }
    end
    return b
  end
  local ok, err = pcall(function()
    while true do
      recv(l, req, REQ_SIZE, timeout)
      local op, n, count = req.op, req.size, req.count
      if op == DONE then return end
      local b = buffers(n, req.seed)
      if op == PINGPONG then
        for i = 0, count - 1 do
          expect(l, b.msg, b.want, n, i, timeout, "serve pingpong")
          send(l, b.msg, n)
        end
      elseif op == PUSH then
        for i = 0, count - 1 do expect(l, b.msg, b.want, n, i, timeout, "serve push") end
        send(l, "\1", 1)
      elseif op == PULL then
        for i = 0, count - 1 do
          stamp(b.want, n, i)
          local sok, serr = l:send(b.want, n)
          if not sok then error(serr, 0) end
        end
        send(l, "", 0)
        recv(l, b.msg, 1, timeout)
      else
        error(string.format("EPROTO: perf: unknown request op %d", op), 0)
      end
    end
  end)
  if not ok then return nil, err end
  return true
end

-- How many messages of n bytes make a fair measurement: about `budget`
-- bytes, within [lo, hi].
local function count_for(n, budget, lo, hi)
  local c = math.floor(budget / math.max(n, 1))
  return math.max(lo, math.min(hi, c))
end
M.count_for = count_for

-- Measure one size. opts: iters (fixed count for every test), timeout,
-- lat_only / bw_only. Returns a row:
--   { size, messages, lat_us (one way), bw_push (GB/s), bw_pull (GB/s) }
function M.measure(l, n, opts)
  opts = opts or {}
  local timeout = opts.timeout or 60
  local seed = (n * 2654435761) % 2147483648 + 1
  local want = pattern(n, seed)
  local msg = ffi.new("uint8_t[?]", math.max(n, 8))
  local req = REQ()
  local row = { size = n, messages = 0 }
  local function request(op, count)
    req.op, req.size, req.count, req.seed = op, n, count, seed
    send(l, req, REQ_SIZE)
  end
  if not opts.bw_only then
    local count = opts.iters or count_for(n, 64 * 2 ^ 20, 5, 2000)
    request(PINGPONG, count)
    local t0
    for i = 0, count - 1 do
      if i == 1 then t0 = now() end         -- the first round trip warms up
      stamp(want, n, i)
      send(l, want, n)
      expect(l, msg, want, n, i, timeout, "pingpong")
    end
    local dt = now() - (t0 or now())
    row.lat_us = count > 1 and dt / (count - 1) / 2 * 1e6 or nil
    row.messages = row.messages + 2 * count
  end
  if not opts.lat_only then
    local count = opts.iters or count_for(n, 256 * 2 ^ 20, 5, 20000)
    -- a short untimed stream each way first: page faults and first touches
    -- of the rings (the other end maps them too) belong to set-up
    local warm = math.max(2, math.min(count, math.floor(4 * 2 ^ 20 / math.max(n, 1))))
    request(PUSH, warm)
    for i = 0, warm - 1 do
      stamp(want, n, i)
      local ok, err = l:send(want, n)
      if not ok then error(err, 0) end
    end
    send(l, "", 0)
    recv(l, msg, 1, timeout)
    request(PULL, warm)
    for i = 0, warm - 1 do expect(l, msg, want, n, i, timeout, "pull") end
    send(l, "\1", 1)
    request(PUSH, count)
    local t0 = now()
    for i = 0, count - 1 do
      stamp(want, n, i)
      local ok, err = l:send(want, n)
      if not ok then error(err, 0) end
      if opts.flush_each then l:flush() end
    end
    send(l, "", 0)
    recv(l, msg, 1, timeout)
    row.bw_push = count * n / (now() - t0) / 1e9
    request(PULL, count)
    t0 = now()
    for i = 0, count - 1 do expect(l, msg, want, n, i, timeout, "pull") end
    row.bw_pull = count * n / (now() - t0) / 1e9
    send(l, "\1", 1)
    row.messages = row.messages + 2 * count
  end
  return row
end

function M.done(l)
  local req = REQ()
  req.op = DONE
  send(l, req, REQ_SIZE)
end

M.DEFAULT_SIZES = { 1, 8, 64, 512, 4096, 32768, 131072, 1048576, 4194304, 16777216 }

-- "1,4K,64KiB,16M" -> { 1, 4096, 65536, 16777216 }
function M.parse_sizes(s)
  local out = {}
  for item in s:gmatch("[^,%s]+") do
    local num, unit = item:match("^(%d+)([KkMmGg]?)i?[Bb]?$")
    if not num then return nil, "bad size '" .. item .. "' (use e.g. 1,4K,64K,16M)" end
    local mult = ({ [""] = 1, k = 1024, K = 1024, m = 2 ^ 20, M = 2 ^ 20, g = 2 ^ 30, G = 2 ^ 30 })[unit]
    local v = tonumber(num) * mult
    if v < 1 or v > 2 ^ 31 then return nil, "size " .. item .. " out of range 1 B .. 2 GiB" end
    out[#out + 1] = v
  end
  if #out == 0 then return nil, "no sizes" end
  return out
end

local function human(n)
  if n >= 2 ^ 20 and n % 2 ^ 20 == 0 then return (n / 2 ^ 20) .. " MiB" end
  if n >= 1024 and n % 1024 == 0 then return (n / 1024) .. " KiB" end
  return n .. " B"
end
M.human = human

-- The table pair.lua prints.
function M.format_header()
  return string.format("%10s %9s %10s %10s %12s", "size", "messages", "GB/s ->", "GB/s <-",
    "latency us")
end

function M.format_row(r)
  local function f(v, fmt) return v and string.format(fmt, v) or "-" end
  return string.format("%10s %9d %10s %10s %12s", human(r.size), r.messages,
    f(r.bw_push, "%.3f"), f(r.bw_pull, "%.3f"), f(r.lat_us, "%.2f"))
end

return M
