-- share_ends.lua - what the specs' processes that share CPUs have in common
-- (cpu_share_end.lua, wait_mark_end.lua, ring_member.lua): their CPU
-- affinity, and a soft link made as one end or the other.
--
--   local E = require("share_ends")     (package.path has spec/support/)
--   E.mask()          -> the mask this process has now, the number of its
--                        CPUs and the first of them
--   E.pin(mask)       set the mask (one from E.mask or E.only)
--   E.only(cpu)       -> a mask of that CPU alone
--   E.cpu()           -> the CPU this thread runs on
--   E.link(role, port, opts)
--       role "listen": prints "port N" (flushed), returns the link accepted
--       role "connect": returns the link to 127.0.0.1:port
--       (inside tbrt.run; raises on a failure)
--   E.await(l, timeout)
--       until bytes are there to read, looking without waiting as a
--       waiter does (tbrt_link_idle marks where it waits), a ms between
--       looks; raises after timeout s
local ffi = require("ffi")
local tbrt = require("tbrt")
local core = require("tbrt.ffi").C

ffi.cdef [[
typedef struct { uint64_t bits[16]; } share_ends_set;
int sched_getaffinity(int pid, size_t size, share_ends_set *mask);
int sched_setaffinity(int pid, size_t size, const share_ends_set *mask);
int sched_getcpu(void);
]]
local C = ffi.C

local E = {}

function E.mask()
  local m = ffi.new("share_ends_set")
  assert(C.sched_getaffinity(0, ffi.sizeof(m), m) == 0, "sched_getaffinity")
  local n, first = 0, nil
  for i = 0, 1023 do
    if bit.band(bit.rshift(m.bits[math.floor(i / 64)], i % 64), 1ULL) ~= 0 then
      n = n + 1
      first = first or i
    end
  end
  return m, n, first
end

function E.only(cpu)
  local m = ffi.new("share_ends_set")
  m.bits[math.floor(cpu / 64)] = bit.lshift(1ULL, cpu % 64)
  return m
end

function E.pin(mask)
  assert(C.sched_setaffinity(0, ffi.sizeof(mask), mask) == 0, "sched_setaffinity")
end

function E.cpu() return C.sched_getcpu() end

function E.link(role, port, opts)
  if role == "listen" then
    local srv = assert(tbrt.listen("127.0.0.1", 0, opts))
    io.stdout:write("port ", srv.port, "\n")
    io.stdout:flush()
    local l = assert(srv:accept(20))
    srv:close()
    return l
  end
  return assert(tbrt.connect("127.0.0.1", port, opts))
end

function E.await(l, timeout)
  local t0 = tbrt.now()
  while core.tbrt_link_ready_for(l._l, core.TBRT_WAIT_RECV) == 0 do
    assert(core.tbrt_link_progress(l._l) >= 0, "progress: " .. l:why())
    assert(tbrt.now() - t0 < timeout, "nothing to read within " .. timeout .. " s")
    tbrt.task.sleep(0.001)
  end
end

return E
