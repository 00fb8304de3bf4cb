-- tbrt/mlx5/init.lua - prototype ConnectX firmware commands from Lua: open the device
-- model or a PCI device through tbrt's user-space mlx5 driver, and send any
-- command built from the layout tables by field name, getting the decoded
-- output back by field name.
--
--   local mlx5 = require("tbrt.mlx5")
--   local dev = assert(mlx5.open{ model = true })
--   local caps = assert(dev:cmd("QUERY_HCA_CAP", { op_mod = 1 }))
--   print(caps["capability.cmd_hca_cap.log_max_qp"])
--   dev:close()
--
-- Errors follow luv: nil, "EPROTO: mlx5 QUERY_HCA_CAP: ... (0x3), syndrome 0x..."
-- plus a third value { status = , syndrome = , delivery = }. Misuse (unknown
-- command, field or option, wrong types) raises.
local T = require("tbrt.ffi")
local ffi, C = T.ffi, T.C
local bit = require("bit")

local M = {}

local U32 = 4294967296
local CAP_LAYOUTS = { [0] = "cmd_hca_cap", [4] = "roce_cap" } -- QUERY_HCA_CAP op_mod >> 1

local function errname(rc) return ffi.string(C.tbrt_errname(-rc)) end

-- ---- layouts -------------------------------------------------------------------
local field_cache = {}
local function field(layout, path)
  local key = layout .. "\0" .. path
  local f = field_cache[key]
  if f == nil then
    local cf = ffi.new("tbrt_mlx5_field")
    if C.tbrt_mlx5_field_find(layout, path, cf) == 0 then
      f = { off = cf.off, width = cf.width, kind = cf.kind }
    else
      f = false
    end
    field_cache[key] = f
  end
  return f or nil
end
M.field = field

-- All fields of a layout: list of { name, off, width, kind }.
local fields_cache = {}
function M.fields(layout)
  local list = fields_cache[layout]
  if list then return list end
  list = {}
  local cf = ffi.new("tbrt_mlx5_field")
  local i = 0
  while C.tbrt_mlx5_field_at(layout, i, cf) == 0 do
    list[#list + 1] = { name = ffi.string(cf.name), off = cf.off, width = cf.width, kind = cf.kind }
    i = i + 1
  end
  fields_cache[layout] = list
  return list
end

function M.size(layout)
  local n = C.tbrt_mlx5_struct_size(layout)
  return n >= 0 and n or nil
end

function M.opcode(name)
  local op = C.tbrt_mlx5_opcode(name)
  return op >= 0 and op or nil
end

function M.const(name)
  local v = ffi.new("uint32_t[1]")
  if C.tbrt_mlx5_const(name, v) ~= 0 then return nil end
  return v[0]
end

function M.const_name(group, value)
  local s = C.tbrt_mlx5_const_name(group, value)
  return s ~= nil and ffi.string(s) or nil
end

-- Read / write one field of a byte buffer (cdata) at a bit offset/width.
local function get(buf, off, width)
  if width <= 32 then return tonumber(C.tbrt_mlx5_get(buf, off, width)) end
  local n = math.floor((width + 7) / 8)
  local out = ffi.new("uint8_t[?]", n)
  C.tbrt_mlx5_get_bytes(buf, off, width, out)
  if width <= 64 then -- a number when exact, else a uint64_t
    local v = ffi.new("uint64_t", 0)
    for i = 0, n - 1 do v = v * 256 + out[i] end
    if v < 2 ^ 53 then return tonumber(v) end
    return v
  end
  return ffi.string(out, n)
end

local function set(buf, off, width, v, what)
  if type(v) == "boolean" then v = v and 1 or 0 end
  if type(v) == "number" then
    if width <= 32 then
      C.tbrt_mlx5_set(buf, off, width, v % U32)
      return
    end
    local n = math.floor((width + 7) / 8)
    local b = ffi.new("uint8_t[?]", n)
    for i = n - 1, 0, -1 do b[i] = v % 256; v = math.floor(v / 256) end
    C.tbrt_mlx5_set_bytes(buf, off, width, b)
  elseif type(v) == "cdata" then -- uint64_t
    local n = math.floor((width + 7) / 8)
    local b = ffi.new("uint8_t[?]", n)
    local x = ffi.cast("uint64_t", v)
    for i = n - 1, 0, -1 do b[i] = tonumber(x % 256); x = x / 256 end
    C.tbrt_mlx5_set_bytes(buf, off, width, b)
  elseif type(v) == "string" then
    local n = math.floor((width + 7) / 8)
    if #v ~= n then error(string.format("mlx5: %s is %d bits: give %d bytes, not %d", what, width, n, #v), 3) end
    C.tbrt_mlx5_set_bytes(buf, off, width, v)
  else
    error("mlx5: " .. what .. ": a number, boolean, uint64 or byte string, not " .. type(v), 3)
  end
end
M.get, M.set = get, set

-- Encode fields into a new buffer of len bytes (default: the layout's size
-- plus what flexible arrays need). Flexible arrays ("pas[]") take a list.
function M.encode(layout, fields, len)
  local size = M.size(layout) or error("mlx5: unknown layout " .. tostring(layout), 2)
  local need = size
  for name, v in pairs(fields) do
    local f = field(layout, name) or error("mlx5: " .. layout .. " has no field " .. tostring(name), 2)
    if f.kind == C.TBRT_MLX5_FLEX then
      if type(v) ~= "table" then error("mlx5: " .. name .. " is a flexible array: give a list", 2) end
      need = math.max(need, math.floor((f.off + f.width * #v) / 8))
    end
  end
  len = len or need
  local buf = ffi.new("uint8_t[?]", len)
  for name, v in pairs(fields) do
    local f = field(layout, name)
    if f.kind == C.TBRT_MLX5_FLEX then
      for i, x in ipairs(v) do
        local off = f.off + f.width * (i - 1)
        if off + f.width > len * 8 then error("mlx5: " .. name .. " does not fit " .. len .. " bytes", 2) end
        set(buf, off, f.width, x, name)
      end
    else
      if f.off + f.width > len * 8 then error("mlx5: " .. name .. " lies beyond " .. len .. " bytes", 2) end
      set(buf, f.off, f.width, v, name)
    end
  end
  return buf, len
end

-- Decode a buffer (cdata or string) as a layout: { field = value }, scalar
-- fields as numbers, wide ones as byte strings; containers are skipped.
function M.decode(layout, buf, len, into, prefix, base)
  if type(buf) == "string" then
    len = len or #buf
    local b = ffi.new("uint8_t[?]", len)
    ffi.copy(b, buf, math.min(#buf, len))
    buf = b
  end
  into, prefix, base = into or {}, prefix or "", base or 0
  for _, f in ipairs(M.fields(layout) or {}) do
    if f.kind ~= C.TBRT_MLX5_CONTAINER and base + f.off + f.width <= len * 8 then
      into[prefix .. f.name] = get(buf, base + f.off, f.width)
    end
  end
  return into
end

-- The layout name of a command's input/output.
local function layout_of(op, output)
  local s = C.tbrt_mlx5_cmd_layout(op, output and 1 or 0)
  return s ~= nil and ffi.string(s) or nil
end
M.layout_of = layout_of

-- ---- devices -------------------------------------------------------------------
local OPEN_OPTS = { model = "boolean", pci = "string", trace = "any", raw = "boolean",
  checksums = "boolean", boot_pages = "number", init_pages = "number", regular_pages = "number",
  timeout = "number" }

local Dev = {}
Dev.__index = Dev
M.Dev = Dev

local function why(self) return ffi.string(C.tbrt_mlx5_why(self.h)) end

function M.open(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("mlx5.open: options table expected", 2) end
  for k, v in pairs(opts) do
    local t = OPEN_OPTS[k]
    if not t then
      local names = {}
      for n in pairs(OPEN_OPTS) do names[#names + 1] = n end
      table.sort(names)
      error("mlx5.open: unknown option " .. tostring(k) .. " (known: " .. table.concat(names, ", ") .. ")", 2)
    end
    if t ~= "any" and type(v) ~= t then error("mlx5.open: " .. k .. " must be a " .. t, 2) end
  end
  if opts.model and opts.pci then error("mlx5.open: model or pci, not both", 2) end
  local o = ffi.new("tbrt_mlx5_opts")
  o.pci = opts.pci
  o.trace = opts.trace and 1 or 0
  o.trace_path = type(opts.trace) == "string" and opts.trace or nil
  o.raw = opts.raw and 1 or 0
  o.checksums = opts.checksums and 1 or 0
  o.model_boot_pages = opts.boot_pages or 0
  o.model_init_pages = opts.init_pages or 0
  o.model_regular_pages = opts.regular_pages or 0
  local out = ffi.new("tbrt_mlx5*[1]")
  local err = ffi.new("char[512]")
  local rc = C.tbrt_mlx5_open(o, out, err, 512)
  if rc ~= 0 then return nil, errname(rc) .. ": " .. ffi.string(err) end
  local self = setmetatable({ h = ffi.gc(out[0], C.tbrt_mlx5_close), owned = true }, Dev)
  if opts.timeout then C.tbrt_mlx5_set_timeout(self.h, opts.timeout * 1000) end
  return self
end

-- The driver under an mlx5 verbs device (tbrt_dev*); not owned.
function M.of_dev(dev)
  local h = C.tbrt_mlx5_of_dev(dev)
  if h == nil then return nil, "EINVAL: not an mlx5 device" end
  return setmetatable({ h = h, owned = false }, Dev)
end

function Dev:addr() return ffi.string(C.tbrt_mlx5_addr(self.h)) end
function Dev:why() return why(self) end

-- Raw command: in/out byte strings (or cdata + lengths). Returns the output
-- bytes as a string, or nil, err, { status, syndrome, delivery }.
function Dev:raw(inbuf, inlen, outlen)
  if type(inbuf) == "string" then inlen = inlen or #inbuf end
  local out = ffi.new("uint8_t[?]", outlen)
  local rc = C.tbrt_mlx5_cmd(self.h, inbuf, inlen, out, outlen)
  if rc ~= 0 then
    return nil, errname(rc) .. ": " .. why(self), {
      status = C.tbrt_mlx5_last_status(self.h), syndrome = C.tbrt_mlx5_last_syndrome(self.h),
      delivery = C.tbrt_mlx5_last_delivery(self.h) }
  end
  return ffi.string(out, outlen)
end

-- Build the command from fields, run it, decode the output.
-- opts: inlen, outlen (override), out_extra (bytes after the output layout).
function Dev:cmd(name, fields, opts)
  if type(name) ~= "string" then error("mlx5 cmd: command name expected", 2) end
  fields, opts = fields or {}, opts or {}
  local op = M.opcode(name) or error("mlx5 cmd: unknown command " .. name, 2)
  local lin, lout = layout_of(op, false), layout_of(op, true)
  if not lin or not lout then error("mlx5 cmd: no layout for " .. name .. " in the tables", 2) end
  local f = {}
  for k, v in pairs(fields) do f[k] = v end
  f.opcode = op
  local ok, inbuf, inlen = pcall(M.encode, lin, f, opts.inlen)
  if not ok then error(inbuf, 2) end
  -- at least the 16 inline bytes, as Linux sends (ENABLE_HCA out is 12 bytes)
  local outlen = opts.outlen or math.max(16, M.size(lout) + (opts.out_extra or 0))
  local out, err, st = self:raw(inbuf, inlen, outlen)
  if not out then return nil, err, st end
  local res = M.decode(lout, out, outlen)
  if lout == "query_hca_cap_out" then
    local cap = CAP_LAYOUTS[bit.rshift(fields.op_mod or 0, 1)]
    local base = field(lout, "capability")
    if cap then M.decode(cap, out, outlen, res, "capability." .. cap .. ".", base.off) end
  end
  res._raw = out
  return res
end

-- DMA memory: returns a uint8_t* and its bus address (a number).
function Dev:dma(size)
  local v, b = ffi.new("void*[1]"), ffi.new("uint64_t[1]")
  local rc = C.tbrt_mlx5_dma_alloc(self.h, size, v, b)
  if rc ~= 0 then return nil, errname(rc) .. ": " .. why(self) end
  return ffi.cast("uint8_t*", v[0]), tonumber(b[0])
end

function Dev:dma_free(bus) return C.tbrt_mlx5_dma_free(self.h, bus) == 0 end

function Dev:inject(what)
  local codes = { token = 1, block_num = 2, signature = 3, type = 4, in_ptr_align = 5, no_doorbell = 6 }
  local c = codes[what] or error("mlx5 inject: one of token, block_num, signature, type, in_ptr_align, no_doorbell", 2)
  C.tbrt_mlx5_inject(self.h, c)
end

function Dev:set_timeout(seconds) C.tbrt_mlx5_set_timeout(self.h, math.max(1, math.floor(seconds * 1000))) end

function Dev:trace(path)
  local rc = C.tbrt_mlx5_trace_to(self.h, path)
  if rc ~= 0 then return nil, errname(rc) .. ": " .. why(self) end
  return true
end

function Dev:state()
  local st = ffi.new("tbrt_mlx5_model_state")
  local rc = C.tbrt_mlx5_model_state_get(self.h, st)
  if rc ~= 0 then return nil, errname(rc) .. ": not a device model" end
  local t = {}
  for _, k in ipairs({ "enabled", "initialized", "issi", "pages_given", "pages_owed", "uars", "pds",
    "mkeys", "eqs", "cqs", "qps", "roce_entries" }) do t[k] = st[k] end
  for _, k in ipairs({ "commands", "bad_commands", "wqes", "cqes", "eqes" }) do t[k] = tonumber(st[k]) end
  return t
end

function Dev:teardown()
  local rc = C.tbrt_mlx5_teardown(self.h)
  if rc ~= 0 then return nil, errname(rc) .. ": " .. why(self) end
  return true
end

function Dev:close()
  if not self.owned or self.h == nil then return true end
  local h = self.h
  self.h = nil
  ffi.gc(h, nil)
  local rc = C.tbrt_mlx5_close(h)
  if rc ~= 0 then return nil, errname(rc) .. ": close failed" end
  return true
end

return M
