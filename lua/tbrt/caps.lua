-- tbrt/caps.lua - the 24-byte caps blob from Lua: decode it to a table,
-- encode one, and the default exchange (each side sends its caps, then
-- reads the peer's). Layouts and validation live in the core (caps.c).
local ffi = require("ffi")
local core = require("tbrt.ffi")

local C = core.C
local M = { SIZE = 24 }

local FLAVOR = { apple = 1, linux = 2 }
local FLAVOR_NAME = { [0] = "none", "apple", "linux" }

-- Decode blob as the given flavor ("apple" | "linux"). Returns a table
-- { flavor, qpn, psn, lid, gid (16-byte string) } (flavor "none" for the
-- all-zero blob), or nil, "EINVAL: caps: ...".
function M.decode(blob, flavor)
  if type(blob) ~= "string" then error("caps.decode: blob must be a string", 2) end
  local f = FLAVOR[flavor or "linux"]
  if not f then error("caps.decode: flavor must be apple or linux", 2) end
  local c = ffi.new("tbrt_caps")
  local err = ffi.new("char[256]")
  local rc = C.tbrt_caps_decode(blob, #blob, f, c, err, 256)
  if rc < 0 then return nil, ffi.string(C.tbrt_errname(rc)) .. ": " .. ffi.string(err) end
  return { flavor = FLAVOR_NAME[c.flavor], qpn = c.qpn, psn = c.psn, lid = c.lid,
    gid = ffi.string(c.gid, 16) }
end

function M.encode(t)
  if type(t) ~= "table" then error("caps.encode: expected a table", 2) end
  local c = ffi.new("tbrt_caps")
  c.flavor = t.flavor == "none" and 0 or FLAVOR[t.flavor] or error("caps.encode: flavor", 2)
  c.qpn, c.psn, c.lid = t.qpn or 0, t.psn or 0, t.lid or 0
  if t.gid then ffi.copy(c.gid, t.gid, 16) end
  local out = ffi.new("uint8_t[24]")
  if C.tbrt_caps_encode(c, out, 24) ~= 0 then return nil, "EINVAL: caps.encode" end
  return ffi.string(out, 24)
end

M.NONE = string.rep("\0", 24)
function M.is_none(blob) return blob == M.NONE end

-- The default exchange over the bootstrap socket: both sides send first
-- (24 bytes always fit in the socket buffer), then read.
-- A timeout says what to check, as the C helpers do (core/engine/connect.c).
function M.exchange(sock, caps, role, timeout)
  local ok, err = sock:send(caps, timeout)
  if not ok then return nil, err end
  local peer, rerr, partial = sock:recv(M.SIZE, timeout)
  if not peer and rerr and rerr:match("^ETIMEDOUT") then
    local got = partial and #partial or 0
    if got == 0 then
      rerr = string.format("ETIMEDOUT: caps exchange: 0 of %d bytes from the peer within %g s: " ..
        "is the other end accepting (tbrt.listen + accept, or tbrt_link_accept in C) and using " ..
        "the default exchange?", M.SIZE, timeout)
    else
      rerr = string.format("ETIMEDOUT: caps exchange: %d of %d bytes from the peer within %g s: " ..
        "does the other end speak another setup protocol?", got, M.SIZE, timeout)
    end
  end
  if peer then return peer end
  return nil, rerr, partial
end

return M
