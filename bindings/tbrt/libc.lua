-- tbrt/libc.lua - the few POSIX calls the Lua side makes on raw fds (the
-- bootstrap socket before the core takes it over). These are libc's stable
-- ABI, not the core's API, so they are declared here rather than generated.
local ffi = require("ffi")

ffi.cdef [[
  typedef long ssize_t;
  ssize_t read(int fd, void *buf, size_t count);
  ssize_t write(int fd, const void *buf, size_t count);
  int close(int fd);
  int dup(int fd);
  int fcntl(int fd, int cmd, ...);
  char *strerror(int errnum);
]]

local C = ffi.C
local M = { C = C }

local F_DUPFD_CLOEXEC = 1030

-- A duplicate of fd numbered 3 or more (never stdin/out/err, which a
-- closed stdio would offer first) and closed on exec (a child must not keep
-- a bootstrap socket open: its EOF is how the peer learns we died).
function M.dup(fd)
  return C.fcntl(fd, F_DUPFD_CLOEXEC, ffi.cast("int", 3))
end

-- errno of the last call (LuaJIT keeps it per call)
function M.errno() return ffi.errno() end

return M
