-- wait_mark_end.lua - one end of cpu_share_spec's wait-mark cases: does a
-- waiter take its peer for one sharing its CPU only while the peer waits on
-- the link, not after it went on to other things?
--   tbrt spec/support/wait_mark_end.lua listen fresh|stale     prints "port N"
--   tbrt spec/support/wait_mark_end.lua connect fresh|stale PORT
-- Both ends start pinned to the first CPU of their mask and make a soft
-- link. The end with the higher QPN ("marker") then looks at the link as a
-- waiter does (tbrt_link_idle, which marks where it waits) for 5 ms, says
-- so, and then (stale) does nothing with the link for 300 ms, or (fresh)
-- goes on looking for them. The end with the lower QPN ("looker") waits
-- 50 ms after the word, gets its whole mask back while still on that CPU,
-- and looks at the link 20 times: a peer it takes for one waiting on its CPU makes it move to
-- another CPU (stats().cpu_moves; the lower QPN moves first). Each prints a
-- last line {"role": R, "moves": M, "cpus": K, "on_first": B}: on_first,
-- whether the looker was on the first CPU when it looked.
local ffi = require("ffi")
local cjson = require("cjson")
local tbrt = require("tbrt")
local C = require("tbrt.ffi").C
local task = tbrt.task

ffi.cdef [[
typedef struct { uint64_t bits[16]; } wait_mark_set;
int sched_getaffinity(int pid, size_t size, wait_mark_set *mask);
int sched_setaffinity(int pid, size_t size, const wait_mark_set *mask);
int sched_getcpu(void);
]]
local libc = ffi.C

local role, mode, port = arg[1], arg[2], tonumber(arg[3])
assert((role == "listen" or role == "connect") and (mode == "fresh" or mode == "stale"),
  "usage: wait_mark_end.lua listen|connect fresh|stale [PORT]")
local start = ffi.new("wait_mark_set")
assert(libc.sched_getaffinity(0, ffi.sizeof(start), start) == 0, "sched_getaffinity")
local cpus, first = 0, nil
for i = 0, 1023 do
  if bit.band(bit.rshift(start.bits[math.floor(i / 64)], i % 64), 1ULL) ~= 0 then
    cpus = cpus + 1
    first = first or i
  end
end
local one = ffi.new("wait_mark_set")
one.bits[math.floor(first / 64)] = bit.lshift(1ULL, first % 64)
assert(libc.sched_setaffinity(0, ffi.sizeof(one), one) == 0, "sched_setaffinity")

local opts = { device = "soft", personality = "linux-rc", timeout = 20, fallback = false }
local out
tbrt.run(function()
  local l
  if role == "listen" then
    local srv = assert(tbrt.listen("127.0.0.1", 0, opts))
    io.stdout:write("port ", srv.port, "\n")
    io.stdout:flush()
    l = assert(srv:accept(20))
    srv:close()
  else
    l = assert(tbrt.connect("127.0.0.1", port, opts))
  end
  local info = l:info()
  local marker = info.qpn > info.peer_qpn
  -- the marker marks for 5 ms, then says so ("m") and (fresh) goes on
  -- marking, or (stale) leaves the link alone; the looker looks 50 ms after
  -- the word (sending one byte never waits, so never marks)
  local on_first, moves = nil, nil
  if marker then
    local t0 = tbrt.now()
    while tbrt.now() - t0 < 0.005 do C.tbrt_link_idle(l._l) end
    assert(l:send("m"))
    assert(l:flush())
    t0 = tbrt.now()
    if mode == "fresh" then
      while tbrt.now() - t0 < 0.3 do C.tbrt_link_idle(l._l) end
    else
      task.sleep(0.3)
    end
  else
    -- the word taken without waiting on the link (a wait looks as a
    -- waiter does, which would spend the looker's turn to move now)
    local t0 = tbrt.now()
    while C.tbrt_link_ready_for(l._l, C.TBRT_WAIT_RECV) == 0 do
      assert(C.tbrt_link_progress(l._l) >= 0, "progress")
      assert(tbrt.now() - t0 < 20, "no word from the marker in 20 s")
      task.sleep(0.001)
    end
    assert(l:recv(1, 20) == "m")
    task.sleep(0.05)
    assert(libc.sched_setaffinity(0, ffi.sizeof(start), start) == 0, "sched_setaffinity")
    on_first = libc.sched_getcpu() == first
    for _ = 1, 20 do C.tbrt_link_idle(l._l) end
    moves = l:stats().cpu_moves
  end
  -- done: the looker says so, the marker waits for it
  if marker then
    assert(l:recv(1, 20) == "e")
  else
    assert(l:send("e"))
    assert(l:flush())
  end
  out = { role = marker and "marker" or "looker", moves = moves or l:stats().cpu_moves, cpus = cpus,
          on_first = on_first }
  l:close()
end)
print(cjson.encode(out))
