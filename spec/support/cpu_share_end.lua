-- cpu_share_end.lua - one end of cpu_share_spec: both ends start pinned to
-- one CPU (so the scheduler has them share it), make a soft link, then
-- (unless "pinned") get back the CPUs they had, and ping-pong 8 bytes.
--   tbrt spec/support/cpu_share_end.lua listen  ROUNDS pinned|free
--       prints "port N", then answers ROUNDS round trips
--   tbrt spec/support/cpu_share_end.lua connect ROUNDS pinned|free PORT
-- Both print a last line {"cpu": C, "moves": M, "cpus": K}: the CPU it ends
-- on, link:stats().cpu_moves, and how many CPUs its mask allowed at the start.
local ffi = require("ffi")
local cjson = require("cjson")
local tbrt = require("tbrt")

ffi.cdef [[
typedef struct { uint64_t bits[16]; } cpu_share_set;
int sched_getaffinity(int pid, size_t size, cpu_share_set *mask);
int sched_setaffinity(int pid, size_t size, const cpu_share_set *mask);
int sched_getcpu(void);
]]
local C = ffi.C

local role, rounds, mode, port = arg[1], tonumber(arg[2]), arg[3], tonumber(arg[4])
local start = ffi.new("cpu_share_set")
assert(C.sched_getaffinity(0, ffi.sizeof(start), start) == 0, "sched_getaffinity")
local cpus, first = 0, nil
for i = 0, 1023 do
  if bit.band(bit.rshift(start.bits[math.floor(i / 64)], i % 64), 1ULL) ~= 0 then
    cpus = cpus + 1
    first = first or i
  end
end
-- the first CPU of the mask only
local one = ffi.new("cpu_share_set")
one.bits[math.floor(first / 64)] = bit.lshift(1ULL, first % 64)
assert(C.sched_setaffinity(0, ffi.sizeof(one), one) == 0, "sched_setaffinity")

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
  if mode == "free" then
    assert(C.sched_setaffinity(0, ffi.sizeof(start), start) == 0, "sched_setaffinity")
  end
  local msg = ffi.new("uint8_t[8]")
  for i = 1, rounds do
    if role == "connect" then
      assert(l:send(msg, 8))
      assert(l:flush())
      assert(l:recv_into(msg, 8, 20))
    else
      assert(l:recv_into(msg, 8, 20))
      assert(l:send(msg, 8))
      assert(l:flush())
    end
  end
  out = { cpu = C.sched_getcpu(), moves = l:stats().cpu_moves, cpus = cpus }
  l:close()
end)
print(cjson.encode(out))
