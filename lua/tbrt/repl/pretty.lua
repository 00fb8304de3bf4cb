-- tbrt/repl/pretty.lua - values as the REPL shows them: tables nested and
-- sorted, cycles marked, lines broken to fit the terminal, strings quoted,
-- tbrt's objects (links, devices, tasks, channels) by their own names.
--
--   pretty.format({ 1, 2, x = { y = "z" } })       --> { 1, 2, x = { y = "z" } }
--   pretty.format(v, { width = 60 })               -- break lines at 60 columns
--   pretty.device_lines(dev)                       -- ports, states and GIDs of a tbrt.verbs device
--
-- A table with a __tostring metamethod prints as that (a link:
-- <link 3 soft0 apple-uc RTS sent=12.0MiB recv=3.1KiB>); a tbrt.verbs device
-- shown on its own also lists its ports and GIDs. Other cdata print as
-- <cdata TYPE: 0xADDR>. A table that contains itself (directly or through
-- its children) shows <cycle> where it comes round again; tables deeper than
-- opts.depth show as {...}, and only the first opts.items entries of a
-- table and the first opts.string bytes of a string are shown.
local M = {}

M.WIDTH = 80          -- a terminal's classic width, when it cannot be asked
M.DEPTH = 8           -- nesting shown before {...}
M.ITEMS = 100         -- entries per table before "... (N more)"
M.STRING = 2000       -- bytes of a string before "... (N bytes)"
local INDENT = 2

local KEYWORD = {}
for w in ("and break do else elseif end false for function goto if in local nil not or " ..
  "repeat return then true until while"):gmatch("%a+") do KEYWORD[w] = true end

local ESCAPES = { ["\\"] = "\\\\", ['"'] = '\\"', ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t",
  ["\0"] = "\\0", ["\a"] = "\\a", ["\b"] = "\\b", ["\f"] = "\\f", ["\v"] = "\\v" }

-- Does s hold valid UTF-8 (so its high bytes may be shown as they are)?
local function utf8_valid(s)
  local i, n = 1, #s
  while i <= n do
    local b = s:byte(i)
    local len = b < 0x80 and 1 or (b >= 0xC2 and b < 0xE0) and 2 or (b >= 0xE0 and b < 0xF0) and 3 or
      (b >= 0xF0 and b < 0xF5) and 4 or 0
    if len == 0 or i + len - 1 > n then return false end
    for j = i + 1, i + len - 1 do
      local c = s:byte(j)
      if c < 0x80 or c >= 0xC0 then return false end
    end
    i = i + len
  end
  return true
end

function M.quote(s, limit)
  limit = limit or M.STRING
  local more = #s > limit and #s - limit or 0
  if more > 0 then s = s:sub(1, limit) end
  local high = utf8_valid(s) and "" or "\128-\255"
  local q = s:gsub("[%c\"\\" .. high .. "]", function(c)
    return ESCAPES[c] or string.format("\\%03d", c:byte())
  end)
  return '"' .. q .. '"' .. (more > 0 and string.format("... (%d more bytes)", more) or "")
end

-- cdata<struct tbrt_link *>: 0x55d0... -> <cdata struct tbrt_link *: 0x55d0...>;
-- numbers (10ULL) and cdata with a __tostring of their own as they are.
local function cdata_text(v)
  local s = tostring(v)
  local ctype, addr = s:match("^cdata<(.*)>: (.*)$")
  if ctype then return "<cdata " .. ctype .. ": " .. addr .. ">" end
  return s
end

local function function_text(f)
  local info = debug.getinfo(f, "S")
  if info.what == "C" then return "<function builtin>" end
  return string.format("<function %s:%d>", info.short_src, info.linedefined)
end

local function verbs_dev_class()
  local verbs = package.loaded["tbrt.verbs"]
  return verbs and verbs.Dev
end

-- Lines describing a tbrt.verbs device's ports: state, MTU and each
-- non-empty GID (index, text, type when the provider has types).
function M.device_lines(dev)
  local out = {}
  if not dev.d then return { "closed" } end
  local attr, err = dev:query()
  if not attr then return { "query: " .. tostring(err) } end
  for p = 1, attr.phys_port_cnt do
    local pa, perr = dev:port(p)
    if not pa then
      out[#out + 1] = string.format("port %d: %s", p, tostring(perr))
    else
      out[#out + 1] = string.format("port %d %s mtu %d", p, pa.state or "?", pa.active_mtu)
      for _, g in ipairs(dev:gids(p) or {}) do
        out[#out + 1] = string.format("  gid %d %s%s", g.index, g.text, g.type and ("  " .. g.type) or "")
      end
    end
  end
  return out
end

local function key_text(k, fmt)
  if type(k) == "string" and k:match("^[%a_][%w_]*$") and not KEYWORD[k] then return k end
  return "[" .. fmt(k) .. "]"
end

local TYPE_ORDER = { number = 1, string = 2, boolean = 3 }

local function key_less(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return (TYPE_ORDER[ta] or 9) < (TYPE_ORDER[tb] or 9) or
    ((TYPE_ORDER[ta] or 9) == (TYPE_ORDER[tb] or 9) and ta < tb) end
  if ta == "number" or ta == "string" then return a < b end
  return tostring(a) < tostring(b)
end

-- The keys of t in print order: the array part 1..n, then the others sorted.
local function ordered_keys(t)
  local n = 0
  while rawget(t, n + 1) ~= nil do n = n + 1 end
  local rest = {}
  for k in pairs(t) do
    if not (type(k) == "number" and k >= 1 and k <= n and k % 1 == 0) then rest[#rest + 1] = k end
  end
  table.sort(rest, key_less)
  return n, rest
end

local function has_tostring(v)
  local mt = getmetatable(v)
  return type(mt) == "table" and mt.__tostring ~= nil
end

-- v as text starting at column col, with nested lines indented by indent.
local function render(v, o, col, indent, depth, path)
  local t = type(v)
  if t == "string" then return M.quote(v, o.string) end
  if t == "cdata" then return cdata_text(v) end
  if t == "function" then return function_text(v) end
  if t ~= "table" then return tostring(v) end
  if has_tostring(v) then
    local ok, s = pcall(tostring, v)
    if ok and type(s) == "string" then return s end
  end
  if path[v] then return "<cycle>" end
  if depth >= o.depth then return next(v) == nil and "{}" or "{...}" end
  local n, rest = ordered_keys(v)
  if n == 0 and #rest == 0 then return "{}" end
  path[v] = true
  local items, count, shown = {}, n + #rest, 0
  local function fmt_key(k) return render(k, o, 0, indent, o.depth, path) end
  local function add(k, value, with_key)
    shown = shown + 1
    if shown > o.items then return end
    local prefix = with_key and (key_text(k, fmt_key) .. " = ") or ""
    items[#items + 1] = { prefix = prefix, value = value }
  end
  for i = 1, n do add(i, v[i], false) end
  for _, k in ipairs(rest) do add(k, v[k], true) end
  -- first try one line; break it if it is too wide or a child broke
  local one, fits, used = {}, true, col + 2
  for i, it in ipairs(items) do
    local s = render(it.value, o, used + #it.prefix, indent + INDENT, depth + 1, path)
    if s:find("\n", 1, true) then fits = false break end
    one[i] = it.prefix .. s
    used = used + #one[i] + 2
    if used > o.width then fits = false break end
  end
  local more = count > #items and string.format("... (%d more)", count - #items) or nil
  if more then one[#one + 1] = more end
  local line = fits and ("{ " .. table.concat(one, ", ") .. " }")
  if line and col + #line <= o.width then
    path[v] = nil
    return line
  end
  local pad = string.rep(" ", indent + INDENT)
  local lines, filling = {}, false
  for _, it in ipairs(items) do
    local s = render(it.value, o, indent + INDENT + #it.prefix, indent + INDENT, depth + 1, path) .. ","
    -- array items that fit on a line share it, as many as fit
    local short = it.prefix == "" and not s:find("\n", 1, true)
    if short and filling and #lines[#lines] + 1 + #s <= o.width then
      lines[#lines] = lines[#lines] .. " " .. s
    else
      lines[#lines + 1] = pad .. it.prefix .. s
    end
    filling = short
  end
  if more then lines[#lines + 1] = pad .. more end
  path[v] = nil
  return "{\n" .. table.concat(lines, "\n") .. "\n" .. string.rep(" ", indent) .. "}"
end

-- The width to fit text to when none is given: M.WIDTH, unless the REPL
-- has put a function asking its terminal here.
function M.width() return M.WIDTH end

-- v as text. opts: width (columns, default M.width()), depth, items, string.
function M.format(v, opts)
  opts = opts or {}
  local o = { width = opts.width or M.width(), depth = opts.depth or M.DEPTH,
    items = opts.items or M.ITEMS, string = opts.string or M.STRING }
  local dev = verbs_dev_class()
  if dev and type(v) == "table" and getmetatable(v) == dev then
    local lines = { tostring(v) }
    local ok, more = pcall(M.device_lines, v)
    if ok then
      for _, l in ipairs(more) do lines[#lines + 1] = "  " .. l end
    end
    return table.concat(lines, "\n")
  end
  return render(v, o, opts.column or 0, 0, 0, {})
end

-- Several values (a call's results) on one line with tabs, or one per line
-- when any of them takes more than a line.
function M.values(list, n, opts)
  local parts, multi = {}, false
  for i = 1, n do
    parts[i] = M.format(list[i], opts)
    if parts[i]:find("\n", 1, true) then multi = true end
  end
  return table.concat(parts, multi and "\n" or "\t")
end

return M
