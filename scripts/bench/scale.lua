-- scale.lua - many links driven from Lua, for `make bench`: what one more
-- link costs the Lua side (the task scheduler, task.poll's handles, the
-- link objects), as tbrt-scale measures it for C.
--
--   tbrt scripts/bench/scale.lua --links N [--size BYTES] [--iters N] [--device D]
--       [--personality P]
--
-- Two processes (this one and a child it starts), N links between them,
-- one task per link on each side. Prints one JSON object: links,
-- setup_ms (per link), rss_kib (per link, this process, after traffic
-- touched the rings), bw (GB/s, all links streaming at once, every message
-- checked), lat_us / lat_max_us (8 B one-way ping-pong on each link in turn
-- while the others stay open, its median round trip: median link and worst).
local argparse = require("argparse")
local cjson = require("cjson")
local ffi = require("ffi")
local uv = require("luv")
local tbrt = require("tbrt")

ffi.cdef [[ int memcmp(const void *a, const void *b, size_t n); ]]

local parser = argparse("tbrt scripts/bench/scale.lua", "N links driven from Lua.")
parser:option("--links", "Links between the two processes."):convert(tonumber):args(1)
parser:option("--size", "Message size, bytes.", "65536"):convert(tonumber)
parser:option("--iters", "Messages in all (spread over the links).", "20000"):convert(tonumber)
parser:option("--device", "Device.", "soft")
parser:option("--personality", "Soft personality.", "linux-rc")
parser:option("--child", "(internal) the other end, connecting to this port."):convert(tonumber)
local args = parser:parse(arg)
local N, SIZE = args.links, args.size
if not N or N < 1 or N > 256 then
  io.stderr:write("scale.lua: --links 1..256\n")
  os.exit(2)
end
local TIMEOUT, LAT_ROUNDS = 60, 200
local opts = { device = args.device, personality = args.personality, timeout = TIMEOUT,
  fallback = false }
local per = math.max(2, math.floor(args.iters / N))

local function fail(msg)
  io.stderr:write("scale.lua", args.child and " (child)" or "", ": ", tostring(msg), "\n")
  os.exit(1)
end

local function rss_kib()
  local f = io.open("/proc/self/statm")
  local _, res = f:read("*n", "*n")
  f:close()
  return res * 4
end

-- a message: the pattern, its index in the first 8 bytes
local pattern = dofile(arg[0]:gsub("[^/]*$", "") .. "pattern.lua")
local function stamp(b, i) if SIZE >= 8 then ffi.cast("uint64_t *", b)[0] = i end end

local function stream_send(l, count)
  local want = pattern(SIZE)
  for i = 0, count - 1 do
    stamp(want, i)
    local ok, err = l:send(want, SIZE)
    if not ok then fail(err) end
  end
  assert(l:flush())
end

local function stream_recv(l, count)
  local want, buf = pattern(SIZE), ffi.new("uint8_t[?]", SIZE)
  for i = 0, count - 1 do
    local got, err = l:recv_into(buf, SIZE, TIMEOUT)
    if not got then fail(err) end
    stamp(want, i)
    if ffi.C.memcmp(buf, want, SIZE) ~= 0 then fail("message " .. i .. " differs") end
  end
end

-- every link at once, one task each; then a 1-byte ack on link 1
local function stream_all(links, count, sending)
  local tasks = {}
  for i, l in ipairs(links) do
    tasks[i] = tbrt.spawn(sending and stream_send or stream_recv, l, count)
  end
  local ok, err = tbrt.all(tasks, TIMEOUT)
  if not ok then fail(err) end
  if sending then
    assert(links[1]:recv(1, TIMEOUT))
  else
    assert(links[1]:send("\1")) ; assert(links[1]:flush())
  end
end

local function median(list)
  table.sort(list)
  local n = #list
  return n % 2 == 1 and list[(n + 1) / 2] or (list[n / 2] + list[n / 2 + 1]) / 2
end

-- one-way us: the median round trip (a busy machine preempts some)
local function pingpong(l, answer)
  local m, back = ffi.new("uint8_t[8]"), ffi.new("uint8_t[8]")
  local rtt = {}
  for i = 1, LAT_ROUNDS do
    local t0 = tbrt.now()
    if not answer then
      ffi.cast("uint32_t *", m)[0] = i
      assert(l:send(m, 8)) ; assert(l:flush())
    end
    local got, err = l:recv_into(back, 8, TIMEOUT)
    if not got then fail(err) end
    if answer then
      assert(l:send(back, 8)) ; assert(l:flush())
    elseif ffi.C.memcmp(m, back, 8) ~= 0 then
      fail("round " .. i .. " came back wrong")
    end
    rtt[i] = tbrt.now() - t0
  end
  return median(rtt) / 2 * 1e6
end

local function run(links, measuring)
  local info = links[1]:info()
  local warm = 2 * (math.floor(info.nbuf * info.stride / SIZE) + 1)
  stream_all(links, warm, measuring)
  local rss = rss_kib()
  local t0 = tbrt.now()
  stream_all(links, per, measuring)
  local dt = tbrt.now() - t0
  -- a ping-pong untimed first: the first link's figure would otherwise
  -- time LuaJIT compiling the loop (1 link read 2.7 us, 64 links 0.8)
  pingpong(links[1], not measuring)
  local lat = {}
  for i, l in ipairs(links) do lat[i] = pingpong(l, not measuring) end
  for _, l in ipairs(links) do l:close() end
  return rss, dt, lat
end

if args.child then
  tbrt.run(function()
    local links = {}
    for i = 1, N do
      local l, err = tbrt.connect("127.0.0.1", args.child, opts)
      if not l then fail(err) end
      links[i] = l
    end
    run(links, false)
  end)
  os.exit(0)
end

tbrt.run(function()
  local srv = assert(tbrt.listen("127.0.0.1", 0, opts))
  local cargs = { arg[0], "--child", tostring(srv.port), "--links", tostring(N), "--size",
    tostring(SIZE), "--iters", tostring(args.iters), "--device", args.device, "--personality",
    args.personality }
  local code
  local child = uv.spawn(uv.exepath(), { args = cargs, stdio = { nil, 2, 2 } },
    function(c) code = c end)
  if not child then fail("cannot start the other end") end
  local rss0 = rss_kib()
  local t0 = tbrt.now()
  local links = {}
  for i = 1, N do
    local l, err = srv:accept(TIMEOUT)
    if not l then child:kill("sigkill") fail(err) end
    links[i] = l
  end
  local setup = tbrt.now() - t0
  srv:close()
  local rss, dt, lat = run(links, true)
  local worst = 0
  for _, v in ipairs(lat) do worst = math.max(worst, v) end
  if not tbrt.task.wait(function() return code ~= nil end, 20) then
    child:kill("sigkill")
    fail("the other end did not finish")
  end
  if code ~= 0 then fail("the other end failed (exit " .. tostring(code) .. ")") end
  print(cjson.encode({ links = N, setup_ms = setup / N * 1e3, rss_kib = (rss - rss0) / N,
    bw = SIZE * per * N / dt / 1e9, lat_us = median(lat), lat_max_us = worst, size = SIZE }))
end)
