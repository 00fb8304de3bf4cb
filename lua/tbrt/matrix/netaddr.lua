-- tbrt/matrix/netaddr.lua - the addresses of a connected socket
-- (getsockname / getpeername as text), for an agent to learn which of its
-- addresses faces the coordinator (that is the one its peers will reach).
local ffi = require("ffi")

ffi.cdef [[
  struct tbrt_matrix_sockaddr { uint16_t family; uint8_t data[126]; };
  int getsockname(int fd, struct tbrt_matrix_sockaddr *addr, uint32_t *len);
  int getpeername(int fd, struct tbrt_matrix_sockaddr *addr, uint32_t *len);
  const char *inet_ntop(int af, const void *src, char *dst, uint32_t size);
]]
local C = ffi.C
local AF_INET, AF_INET6 = 2, 10

local M = {}

local function text(fn, fd)
  local sa = ffi.new("struct tbrt_matrix_sockaddr")
  local len = ffi.new("uint32_t[1]", ffi.sizeof(sa))
  if fn(fd, sa, len) ~= 0 then return nil, "getsockname/getpeername failed (errno " .. ffi.errno() .. ")" end
  local buf = ffi.new("char[64]")
  local port = sa.data[0] * 256 + sa.data[1]
  if sa.family == AF_INET then
    -- sockaddr_in: port (2), addr (4) after the family
    if C.inet_ntop(AF_INET, sa.data + 2, buf, 64) == nil then return nil, "inet_ntop failed" end
  elseif sa.family == AF_INET6 then
    -- sockaddr_in6: port (2), flowinfo (4), addr (16)
    if C.inet_ntop(AF_INET6, sa.data + 6, buf, 64) == nil then return nil, "inet_ntop failed" end
  else
    return nil, "address family " .. sa.family .. " is not IP"
  end
  local addr = ffi.string(buf)
  if addr:match("^::ffff:%d+%.%d+%.%d+%.%d+$") then addr = addr:sub(8) end
  return addr, port
end

function M.sockname(fd) return text(C.getsockname, fd) end
function M.peername(fd) return text(C.getpeername, fd) end

return M
