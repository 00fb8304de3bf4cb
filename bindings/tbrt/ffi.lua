-- tbrt/ffi.lua - the one place Lua meets the C core: declares the generated
-- cdef once, loads libtbrt and checks that both come from the same header.
--
-- The library is found, in order, at $TBRT_LIB, in $TBRT_BUILD (the build
-- tree; set by the tbrt program and the spec runner), next to the installed
-- Lua modules (PREFIX/share/tbrt/lua -> PREFIX/lib), then by the system's
-- search path.
local ffi = require("ffi")
local cdef = require("tbrt.cdef")

local M = { ffi = ffi }

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  return false
end

local function candidates()
  local list = {}
  local env = os.getenv("TBRT_LIB")
  if env and env ~= "" then list[#list + 1] = env end
  local build = os.getenv("TBRT_BUILD")
  if build and build ~= "" then list[#list + 1] = build .. "/libtbrt.so" end
  -- this file lives in PREFIX/share/tbrt/lua/tbrt/ffi.lua once installed
  local here = debug.getinfo(1, "S").source:match("^@(.*)/tbrt/ffi%.lua$")
  if here then
    list[#list + 1] = here .. "/../../../lib/libtbrt.so"       -- installed
    list[#list + 1] = here .. "/../../build/libtbrt.so"        -- build tree
  end
  return list
end

local function load_library()
  local tried = {}
  for _, path in ipairs(candidates()) do
    if exists(path) then return ffi.load(path), path end
    tried[#tried + 1] = path
  end
  local ok, lib = pcall(ffi.load, "tbrt")
  if ok then return lib, "libtbrt.so" end
  error("tbrt: cannot find libtbrt.so (tried " .. table.concat(tried, ", ") ..
    " and the system path); build it with make, or set TBRT_LIB", 0)
end

ffi.cdef(cdef.cdef)
local C, path = load_library()
M.C, M.path = C, path

-- Same header on both sides, or nothing works: a stale cdef would read
-- structs at the wrong offsets.
local lib_hash = ffi.string(C.tbrt_header_hash())
if lib_hash ~= cdef.header_hash then
  error(string.format("tbrt: ABI mismatch: %s was built from header %s but the Lua cdef was " ..
    "generated from header %s; rebuild with make", path, lib_hash, cdef.header_hash), 0)
end
if C.tbrt_abi_version() ~= C.TBRT_ABI_VERSION then
  error(string.format("tbrt: ABI version mismatch: library %d, bindings %d", C.tbrt_abi_version(),
    C.TBRT_ABI_VERSION), 0)
end

-- "ECONNRESET: link 2: ..." from a negative errno and a message.
function M.err(rc, msg)
  return ffi.string(C.tbrt_errname(rc)) .. ": " .. (msg or "")
end

return M
