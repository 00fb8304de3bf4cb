-- tbrt/repl/complete.lua - tab completion for the REPL: globals, fields and
-- methods of the name path before the cursor.
--
--   complete.at("link:s", _G)   -> { part = "s", names = { "send", "settimeouts", "stats" } }
--   complete.common({ "send", "settimeouts" })  -> "se"
--
-- Only plain name paths are looked at (a.b.c, a.b:c): nothing is called, so
-- completing never runs user code beyond an __index metamethod, and an
-- error in one is ignored. Fields come from the value and the chain of
-- __index tables of its metatables (a link's methods live in link.Link);
-- after ":" only functions are offered. Strings complete to the string
-- library, as s:method() would find it.
local M = {}

-- How many __index tables to follow (a class chain is rarely deeper than
-- a few; the bound stops a loop of metatables).
local MAX_CHAIN = 16

local KEYWORDS = { "and", "break", "do", "else", "elseif", "end", "false", "for", "function",
  "goto", "if", "in", "local", "nil", "not", "or", "repeat", "return", "then", "true", "until",
  "while" }

local function index(v, k)
  local t = type(v)
  if t ~= "table" and t ~= "userdata" and t ~= "string" then return nil end
  local ok, r = pcall(function() return v[k] end)
  return ok and r or nil
end

local function is_callable(v)
  if type(v) == "function" then return true end
  local ok, mt = pcall(getmetatable, v)
  return ok and type(mt) == "table" and mt.__call ~= nil
end

-- The field names of v and of its __index chain, with their values.
function M.fields(v)
  local out, seen = {}, {}
  local function add(name, value)
    if type(name) == "string" and name:match("^[%a_][%w_]*$") and out[name] == nil then
      out[name] = value
    end
  end
  if type(v) == "string" then v = string end
  for _ = 1, MAX_CHAIN do
    if type(v) == "table" and not seen[v] then
      seen[v] = true
      for k, x in pairs(v) do add(k, x) end
    end
    local ok, mt = pcall(getmetatable, v)
    if not ok or type(mt) ~= "table" or type(mt.__index) ~= "table" or seen[mt.__index] then break end
    v = mt.__index
  end
  return out
end
local fields = M.fields

-- The longest prefix shared by every name.
function M.common(names)
  local c = names[1] or ""
  for i = 2, #names do
    local n = names[i]
    local j = 0
    while j < #c and j < #n and c:byte(j + 1) == n:byte(j + 1) do j = j + 1 end
    c = c:sub(1, j)
  end
  return c
end

-- Completions for the text before the cursor: { part, names } where part
-- is the partial name being completed (the last #part bytes of before).
function M.at(before, env)
  env = env or _G
  local word = before:match("[%a_][%w_%.:]*$")
  if not word or before:sub(-#word - 1, -#word - 1):match("[%w_]") then
    word = before:match("[%a_][%w_]*$") or ""
  end
  local head, sep, part = word:match("^(.-)([%.:])([%w_]*)$")
  local pool, methods
  if not head then
    part = word
    pool = fields(env)
    for _, k in ipairs(KEYWORDS) do pool[k] = pool[k] or true end
  else
    if head:find(":", 1, true) or head == "" then return { part = part, names = {} } end
    local v = env
    for name in head:gmatch("[^%.]+") do
      v = index(v, name)
      if v == nil then return { part = part, names = {} } end
    end
    pool = fields(v)
    methods = sep == ":"
  end
  local names = {}
  for name, value in pairs(pool) do
    if name:sub(1, #part) == part and (not methods or is_callable(value)) then
      names[#names + 1] = name
    end
  end
  table.sort(names)
  return { part = part, names = names }
end

return M
