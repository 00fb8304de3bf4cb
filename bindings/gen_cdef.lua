-- gen_cdef.lua - turn core/include/tbrt.h into the LuaJIT ffi.cdef module.
--
--   luajit bindings/gen_cdef.lua [--cc CC] [--cppflags FLAGS] HEADER... > tbrt/cdef.lua
--   luajit bindings/gen_cdef.lua --check tbrt/cdef.lua HEADER...
--
-- The declarations between the "tbrt:cdef begin/end" markers of each header
-- (core/include/tbrt.h first, then the others) are taken as they are (the
-- headers keep them free of macros). The <infiniband/verbs.h>
-- types they use are taken from the C preprocessor's own expansion of the
-- header, with the same compiler that builds the library, so the layouts Lua
-- sees are the layouts C compiled. Types only ever used through a pointer,
-- and the big provider objects (ibv_context, ibv_qp, ...), stay opaque.
--
-- The module records the sha256 of the headers; the library reports the same
-- hash (tbrt_header_hash), and --check fails when the module is stale, so a
-- header edited without regenerating cannot build or load.

local function die(fmt, ...)
  io.stderr:write("gen_cdef: ", string.format(fmt, ...), "\n")
  os.exit(1)
end

local function read(path)
  local f, err = io.open(path, "rb")
  if not f then die("%s", err) end
  local s = f:read("*a")
  f:close()
  return s
end

local function shq(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- sha256 of the headers concatenated, as the Makefile computes it
local function sha16(paths)
  local q = {}
  for i, p in ipairs(paths) do q[i] = shq(p) end
  local p = io.popen("cat " .. table.concat(q, " ") .. " | sha256sum")
  local out = p:read("*l") or ""
  p:close()
  local h = out:match("^(%x+)")
  if not h then die("sha256sum of %s failed", table.concat(paths, " ")) end
  return h:sub(1, 16)
end

if arg[1] == "--check" then
  local cdef, headers = arg[2], { unpack(arg, 3) }
  if not cdef or #headers == 0 then die("usage: gen_cdef.lua --check CDEF HEADER...") end
  local want = sha16(headers)
  local got = read(cdef):match('header_hash%s*=%s*"(%x+)"')
  if got ~= want then
    die("%s is stale: generated from headers with hash %s, but %s now hash to %s; " ..
      "run make to regenerate", cdef, tostring(got), table.concat(headers, " "), want)
  end
  os.exit(0)
end

local cc, cppflags, headers = "cc", "", {}
do
  local i = 1
  while i <= #arg do
    if arg[i] == "--cc" then cc = arg[i + 1]; i = i + 2
    elseif arg[i] == "--cppflags" then cppflags = arg[i + 1]; i = i + 2
    else headers[#headers + 1] = arg[i]; i = i + 1 end
  end
end
if #headers == 0 then die("usage: gen_cdef.lua [--cc CC] [--cppflags F] HEADER...") end
local header = table.concat(headers, " ")

local bodies = {}
for _, h in ipairs(headers) do
  local text = read(h)
  local b = text:match("/%* tbrt:cdef begin %*/(.-)/%* tbrt:cdef end %*/")
  if not b then die("%s has no tbrt:cdef begin/end markers", h) end
  if b:find("\n%s*#") then die("%s: preprocessor lines inside the cdef markers", h) end
  -- comments out; LuaJIT's parser takes them, but the output reads better without
  bodies[#bodies + 1] = b:gsub("/%*.-%*/", ""):gsub("\n%s*\n%s*\n+", "\n\n")
end
local body = table.concat(bodies, "\n")

-- The preprocessor's view of verbs.h.
local tmp = os.tmpname()
local f = io.open(tmp .. ".c", "w")
f:write("#include <infiniband/verbs.h>\n")
f:close()
local pp = io.popen(string.format("%s %s -E -P %s.c 2>&1", cc, cppflags, tmp))
local cpp = pp:read("*a")
local ok = pp:close()
os.remove(tmp .. ".c")
os.remove(tmp)
if not ok or #cpp < 1000 then die("preprocessing verbs.h failed: %s", cpp:sub(1, 500)) end

-- Split the preprocessed text into top-level declarations: text up to a ';'
-- at brace depth 0, or up to the '}' that closes a function body.
local decls = {}
do
  local depth, start, i, n = 0, 1, 1, #cpp
  while i <= n do
    local c = cpp:sub(i, i)
    if c == "{" then
      depth = depth + 1
    elseif c == "}" then
      depth = depth - 1
      if depth == 0 then
        -- a function body ends here unless a declarator or ';' follows
        local rest = cpp:match("^%s*(.)", i + 1)
        local head = cpp:sub(start, i)
        if rest ~= ";" and not head:match("^%s*typedef") and not head:match("^%s*struct")
            and not head:match("^%s*union") and not head:match("^%s*enum") then
          decls[#decls + 1] = { text = head, func = true }
          start = i + 1
        end
      end
    elseif c == ";" and depth == 0 then
      decls[#decls + 1] = { text = cpp:sub(start, i) }
      start = i + 1
    end
    i = i + 1
  end
end

-- Index the type definitions by name: "struct ibv_wc", "enum ibv_qp_type",
-- and typedef names.
local defs, order, anon = {}, {}, {}
for idx, d in ipairs(decls) do
  if not d.func then
    local t = d.text:gsub("__extension__", ""):gsub("^%s+", "")
    local kind, name = t:match("^(struct)%s+([%w_]+)%s*{")
    if not kind then kind, name = t:match("^(union)%s+([%w_]+)%s*{") end
    if not kind then kind, name = t:match("^(enum)%s+([%w_]+)%s*{") end
    if kind then
      local key = kind .. " " .. name
      if not defs[key] then defs[key] = t; order[key] = idx end
    elseif t:match("^enum%s*{") then
      -- an anonymous enum: found through its enumerators
      local key = "anon enum " .. idx
      defs[key] = t
      order[key] = idx
      for name in t:match("{(.*)}"):gmatch("([%a_][%w_]*)%s*[=,}]") do anon[name] = key end
      for name in t:match("{(.*)}"):gmatch("([%a_][%w_]*)%s*$") do anon[name] = key end
    elseif t:match("^typedef") and not t:find("%(") then
      local tname = t:match("([%w_]+)%s*;%s*$")
      if tname and not defs[tname] then defs[tname] = t; order[tname] = idx end
    end
  end
end

-- Provider objects stay opaque: scripts hold pointers to them, never fields.
local opaque = {}
for _, n in ipairs { "ibv_context", "ibv_device", "ibv_pd", "ibv_cq", "ibv_qp", "ibv_srq",
  "ibv_mr", "ibv_mw", "ibv_ah", "ibv_comp_channel", "ibv_xrcd", "ibv_dm", "ibv_td",
  "ibv_cq_ex", "ibv_wq", "ibv_rwq_ind_table", "ibv_flow", "ibv_counters", "ibv_pd_ex" } do
  opaque["struct " .. n] = true
end
local builtin = {}
for _, n in ipairs { "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t",
  "uint32_t", "uint64_t", "size_t", "ssize_t", "intptr_t", "uintptr_t", "ptrdiff_t" } do
  builtin[n] = true
end

-- Walk the types the tbrt declarations name, then what their definitions
-- name in turn.
local want, forward = {}, {}
local function scan(src)
  for kind, name in src:gmatch("(%a+)%s+(ibv_[%w_]+)") do
    if kind == "struct" or kind == "union" or kind == "enum" then
      local key = kind .. " " .. name
      if opaque[key] then
        forward[key] = true
      elseif not want[key] then
        if not defs[key] then
          forward[key] = true
        else
          want[key] = true
          scan(defs[key])
        end
      end
    end
  end
  for name in src:gmatch("[%w_]+") do
    if defs[name] and not want[name] and not builtin[name] then
      want[name] = true
      scan(defs[name])
    end
    local a = anon[name]
    if a and not want[a] then
      want[a] = true
      scan(defs[a])
    end
  end
end
scan(body)
-- The verbs enums scripts name constants of (ffi.C.IBV_QPT_UC ...), even
-- where the tbrt declarations carry them as plain ints.
for _, e in ipairs { "ibv_qp_type", "ibv_qp_state", "ibv_qp_attr_mask", "ibv_wc_status",
  "ibv_wc_opcode", "ibv_wc_flags", "ibv_wr_opcode", "ibv_send_flags", "ibv_access_flags",
  "ibv_port_state", "ibv_mtu", "ibv_gid_type" } do
  scan("enum " .. e)
end

local keys = {}
for k in pairs(want) do keys[#keys + 1] = k end
table.sort(keys, function(a, b) return order[a] < order[b] end)
local fwd = {}
for k in pairs(forward) do if not want[k] then fwd[#fwd + 1] = k end end
table.sort(fwd)

local out = {}
local function emit(s) out[#out + 1] = s end
emit("-- tbrt/cdef.lua - GENERATED by bindings/gen_cdef.lua from " .. header .. "; do not edit.")
emit("-- Loaded once by tbrt.ffi, which checks header_hash against the library.")
emit("return {")
emit(string.format('  header_hash = "%s",', sha16(headers)))
emit("  cdef = [==[")
for _, k in ipairs(fwd) do emit(k .. ";") end
for _, k in ipairs(keys) do
  local d = defs[k]:gsub("__attribute__%s*%b()", ""):gsub("__extension__", "")
  emit(d)
end
emit(body)
emit("]==],")
emit("}")
io.write(table.concat(out, "\n"), "\n")
