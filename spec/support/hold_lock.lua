-- hold_lock.lua - another process holding a file's flock (soft_fabric_spec:
-- a registry locked by a process stopped while holding it).
--   tbrt spec/support/hold_lock.lua PATH SECONDS
-- Takes LOCK_EX on PATH, says "held", keeps it SECONDS (killing it lets go).
local ffi = require("ffi")
ffi.cdef [[ int open(const char *, int, ...); int flock(int, int); int usleep(unsigned); ]]
local path, secs = arg[1], tonumber(arg[2])
assert(path and secs, "usage: hold_lock.lua PATH SECONDS")
local fd = ffi.C.open(path, 2)                  -- O_RDWR
assert(fd >= 0, "cannot open " .. path)
assert(ffi.C.flock(fd, 2) == 0, "cannot lock " .. path)      -- LOCK_EX
io.stdout:write("held\n")
io.stdout:flush()
-- in steps: usleep takes less than a second's worth on some systems
for _ = 1, math.ceil(secs * 10) do ffi.C.usleep(100000) end
