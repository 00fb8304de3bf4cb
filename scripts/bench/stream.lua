-- stream.lua - the Lua twin of tbrt-stream (scripts/bench/tbrt_stream.c),
-- for `make bench`: streaming through the copying calls against the
-- zero-copy views, driven from Lua, the same messages and checks as the C
-- program, so Lua and C can be compared call for call.
--
--   tbrt scripts/bench/stream.lua DEVICE PERSONALITY copy|view SIZE ITERS
--       -> "stream_<mode>_<size> X GB/s"
--
-- This process sends ITERS messages of SIZE bytes (no flush between them)
-- and measures until the other end's 1-byte ack; the other end (a child
-- tbrt process running this script with --child PORT) checks each one
-- against the pattern stamped with its index: after recv_into into its
-- buffer (copy), or in place, view by view (view). The check is the C
-- program's own (build/libtbrt-bench-pattern.so, beside the tbrt that runs
-- this), so the two differ only in how they drive tbrt. A short untimed
-- warm-up first.
local ffi = require("ffi")
local uv = require("luv")
local tbrt = require("tbrt")

ffi.cdef [[
  bool bench_pattern_ok(const uint8_t *p, size_t off, size_t n, uint64_t idx);
  long bench_pattern_bad(const uint8_t *p, size_t off, size_t n, uint64_t idx);
]]
local check_lib = uv.exepath():gsub("[^/]*$", "") .. "libtbrt-bench-pattern.so"
local ok_lib, P = pcall(ffi.load, check_lib)
if not ok_lib then
  io.stderr:write("stream.lua: the message check ", check_lib, ": ", tostring(P), " (make)\n")
  os.exit(1)
end

local WARM, TIMEOUT = 8, 60
local dev, pers, mode, size, iters, child_port = arg[1], arg[2], arg[3], tonumber(arg[4]),
  tonumber(arg[5]), arg[6] == "--child" and tonumber(arg[7]) or nil
if not (dev and pers and (mode == "copy" or mode == "view") and size and size > 0 and
    iters and iters > 0) then
  io.stderr:write("usage: tbrt scripts/bench/stream.lua DEVICE PERSONALITY copy|view SIZE ITERS\n")
  os.exit(2)
end
local view = mode == "view"
local opts = { device = dev, personality = pers ~= "-" and pers or nil, timeout = TIMEOUT,
  fallback = false }

local function fail(msg)
  io.stderr:write("stream.lua", child_port and " (child)" or "", ": ", tostring(msg), "\n")
  os.exit(1)
end

-- the sender's source (the receiver checks against the pattern computed)
local want = not child_port and dofile(arg[0]:gsub("[^/]*$", "") .. "pattern.lua")(size) or nil
local index = want and ffi.cast("uint64_t *", want)
local function stamp(i) if size >= 8 then index[0] = i end end

local function send_msg(l)
  if not view then
    local ok, err = l:send(want, size)
    if not ok then fail(err) end
    return
  end
  local off = 0
  while off < size do
    local p, n = l:send_view(size - off)
    if not p then fail(n) end
    ffi.copy(p, want + off, n)
    local ok, err = l:commit(n)
    if not ok then fail(err) end
    off = off + n
  end
end

local buf = ffi.new("uint8_t[?]", size)
local function recv_msg(l, i)
  if not view then
    local got, err = l:recv_into(buf, size, TIMEOUT)
    if not got then fail(err) end
    if not P.bench_pattern_ok(buf, 0, size, i) then
      fail("message " .. i .. " differs at byte " .. tonumber(P.bench_pattern_bad(buf, 0, size, i)))
    end
    return
  end
  local off = 0
  while off < size do
    local p, n = l:recv_view(TIMEOUT)
    if not p then fail(n) end
    if n > size - off then n = size - off end
    if not P.bench_pattern_ok(p, off, n, i) then
      fail("message " .. i .. " differs at byte " .. tonumber(P.bench_pattern_bad(p, off, n, i)))
    end
    l:release(n)
    off = off + n
  end
end

local function ack(l) assert(l:send("\1")) ; assert(l:flush()) end
local function wait_ack(l)
  local ok, err = l:flush()
  if not ok then fail(err) end
  ok, err = l:recv(1, TIMEOUT)
  if not ok then fail(err) end
end

if child_port then
  tbrt.run(function()
    local l, err = tbrt.connect("127.0.0.1", child_port, opts)
    if not l then fail(err) end
    for i = 0, WARM - 1 do recv_msg(l, i) end
    ack(l)
    for i = 0, iters - 1 do recv_msg(l, i) end
    ack(l)
    if os.getenv("TBRT_BENCH_STATS") then
      local s = l:stats()
      io.stderr:write(string.format("# receiver: %d frames, %d completions, %d spins, %d sleeps, " ..
        "%d eagain\n", s.frames_recv, s.completions, s.spins, s.sleeps, s.eagain))
    end
    l:close()
  end)
  os.exit(0)
end

tbrt.run(function()
  local srv = assert(tbrt.listen("127.0.0.1", 0, opts))
  local code
  local child = uv.spawn(uv.exepath(), { args = { arg[0], dev, pers, mode, tostring(size),
    tostring(iters), "--child", tostring(srv.port) }, stdio = { nil, 2, 2 } },
    function(c) code = c end)
  if not child then fail("cannot start the other end") end
  local l, err = srv:accept(TIMEOUT)
  srv:close()
  if not l then child:kill("sigkill") fail(err) end
  for i = 0, WARM - 1 do stamp(i) send_msg(l) end
  wait_ack(l)
  local t0 = tbrt.now()
  for i = 0, iters - 1 do stamp(i) send_msg(l) end
  wait_ack(l)
  local dt = tbrt.now() - t0
  if os.getenv("TBRT_BENCH_STATS") then
    local s = l:stats()
    io.stderr:write(string.format("# sender: %d frames, %d completions, %d spins, %d sleeps, " ..
      "%d eagain\n", s.frames_sent, s.completions, s.spins, s.sleeps, s.eagain))
  end
  l:close()
  if not tbrt.task.wait(function() return code ~= nil end, 20) then
    child:kill("sigkill")
    fail("the other end did not finish")
  end
  if code ~= 0 then fail("the other end failed (exit " .. tostring(code) .. ")") end
  print(string.format("stream_%s_%d %.3f GB/s", mode, size, size * iters / dt / 1e9))
end)
