-- tbrt/matrix/file.lua - load and check a matrix file: a Lua chunk that
-- returns the description of a matrix (see scripts/matrix/*.lua).
--
--   local spec = assert(file.load("scripts/matrix/netns4.lua"))
--   spec.hosts    { kind = "netns", count = 4, ... }
--   spec.patterns { { kind = "pairwise", label = "pairwise" }, ... }
--   spec.axes     { { name = "device", values = { "tcp", "soft" } }, ... }  link options
--   spec.sizes, spec.faults ({ { name = "drop", values = {...} } }), spec.reps
--
-- Every table of options is declared below as data and checked: an unknown
-- key is an error naming the place, the key and the keys allowed; a bad
-- value says what was expected. Link options (the axes other than size,
-- faults and repetitions, and the fixed `link` table) are not checked
-- here: the host that makes the link checks them (tbrt.link.check_opts),
-- so a matrix written for a newer tbrt fails cell by cell with that tbrt's
-- reason instead of not loading at all. file.unknown_link_options(spec)
-- lists the ones this tbrt would refuse, for a warning.
--
-- The file runs in the driver and again in every agent (which need its
-- scenario functions), so it should only describe: no side effects.
--
-- liveness (15 s): an agent silent that long is taken for gone. A link on
-- shared memory that always makes progress may keep its agent from
-- answering pings until a measurement ends, so keep it above the longest
-- single measurement (the measure budgets bound those).
local perf = require("tbrt.perf")

local M = {}

M.MAX_TEXT = 512 * 1024            -- the file travels to agents in one message
M.LAUNCHERS = { "netns", "local", "ssh", "mpirun", "srun" }
M.BUILTIN_PATTERNS = { pairwise = true, ring = true, bisection = true, one_to_all = true }
local MAX_HOSTS = 256

local function fail(where, fmt, ...)
  error({ matrix_error = where .. ": " .. string.format(fmt, ...) }, 0)
end

local function keys_of(decl)
  local k = {}
  for name in pairs(decl) do k[#k + 1] = name end
  table.sort(k)
  return table.concat(k, ", ")
end

local function is_list(t)
  if type(t) ~= "table" then return false end
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n == #t
end

local function int(v, lo, hi)
  return type(v) == "number" and v % 1 == 0 and v >= lo and (not hi or v <= hi)
end

-- checks: each returns true or a text saying what was expected
local function t_string(v) return type(v) == "string" or "a string" end
local function t_function(v) return type(v) == "function" or "a function" end
local function t_pos(v) return (type(v) == "number" and v > 0 and v < 1e7) or "a number of seconds > 0" end
local function t_count(lo, hi)
  return function(v) return int(v, lo, hi) or string.format("an integer %d..%d", lo, hi) end
end
local function t_strings(v)
  if not is_list(v) then return "a list of strings" end
  for _, s in ipairs(v) do if type(s) ~= "string" then return "a list of strings" end end
  return true
end
local function t_table(v) return type(v) == "table" or "a table" end
local function t_env(v)
  if type(v) ~= "table" then return "a table NAME = value" end
  for k, x in pairs(v) do
    if type(k) ~= "string" or not k:match("^[%a_][%w_]*$") or type(x) ~= "string" then
      return "a table NAME = \"value\" (names of letters, digits, _)"
    end
  end
  return true
end

-- Check t against decl { key = check }; positional entries allowed only
-- when decl[1] is a check for them.
local function check_table(t, decl, where)
  if type(t) ~= "table" then fail(where, "expected a table, got %s", type(t)) end
  for k, v in pairs(t) do
    local c = decl[k]
    if type(k) == "number" and decl[1] then c = decl[1] end
    if not c then
      fail(where, "unknown key %s (allowed: %s)", tostring(k), keys_of(decl))
    end
    local ok = c(v)
    if ok ~= true then fail(where .. "." .. tostring(k), "expected %s, got %s", ok, tostring(v)) end
  end
  return t
end

---------------------------------------------------------------------------
-- Declarations.

local TOP = {
  name = t_string, description = t_string, hosts = t_table, patterns = t_table, axes = t_table,
  link = t_table, measure = t_table, timeout = function(v)
    return type(v) == "function" or t_pos(v)
  end, filter = t_function, launch_timeout = t_pos, seed = t_count(0, 2 ^ 31), liveness = t_pos,
}

local MEASURE = {
  test = function(v) return (v == "lat" or v == "bw" or v == "both") or "lat, bw or both" end,
  lat_iters = t_count(2, 1e7), bw_iters = t_count(1, 1e7),
  lat_bytes = t_count(1, 2 ^ 40), bw_bytes = t_count(1, 2 ^ 40), warmup = t_count(0, 1e6),
}

local HOSTS = {
  netns = { count = t_count(2, 64), prefix = t_string },
  ["local"] = { count = t_count(1, MAX_HOSTS) },
  ssh = { t_string, hosts = t_strings, options = t_strings, ssh = t_string, tbrt = t_string,
    coordinator = t_string, env = t_env, connect_timeout = t_pos },
  mpirun = { np = t_count(1, MAX_HOSTS), command = t_string, args = t_strings, tbrt = t_string,
    coordinator = t_string, env = t_env },
  srun = { ntasks = t_count(1, MAX_HOSTS), nodes = t_count(1, MAX_HOSTS), command = t_string,
    args = t_strings, tbrt = t_string, coordinator = t_string, env = t_env },
}

local PATTERN = {
  pairwise = { t_string },
  ring = { t_string, order = function(v) return (v == "ordered" or v == "random") or "ordered or random" end,
    seed = t_count(0, 2 ^ 31) },
  bisection = { t_string, seed = t_count(0, 2 ^ 31) },
  one_to_all = { t_string, root = t_count(0, MAX_HOSTS), concurrent = function(v)
    return type(v) == "boolean" or "true or false" end },
  scenario = { name = t_string, scenario = t_function, timeout = t_pos },
}

M.MEASURE_DEFAULTS = { test = "both", lat_bytes = 4 * 2 ^ 20, bw_bytes = 32 * 2 ^ 20, warmup = 10 }

---------------------------------------------------------------------------

local function check_hosts(h)
  local kind, decl
  for k, v in pairs(h) do
    if not HOSTS[k] then
      fail("hosts", "unknown launcher %s (one of: %s)", tostring(k), table.concat(M.LAUNCHERS, ", "))
    end
    if kind then fail("hosts", "names two launchers (%s and %s): a matrix has one", kind, k) end
    kind, decl = k, v
  end
  if not kind then fail("hosts", "names no launcher (one of: %s)", table.concat(M.LAUNCHERS, ", ")) end
  local where = "hosts." .. kind
  if type(decl) == "number" then
    if kind ~= "netns" and kind ~= "local" then fail(where, "expected a table, got a number") end
    decl = { count = decl }
  end
  check_table(decl, HOSTS[kind], where)
  local out = { kind = kind }
  for k, v in pairs(decl) do if type(k) ~= "number" then out[k] = v end end
  if kind == "netns" or kind == "local" then
    if not decl.count then fail(where, "count is required (how many hosts)") end
    out.count = decl.count
  elseif kind == "ssh" then
    local list = {}
    for _, s in ipairs(decl) do list[#list + 1] = s end
    for _, s in ipairs(decl.hosts or {}) do list[#list + 1] = s end
    if #list == 0 then fail(where, "names no host (a list of [user@]host[:port])") end
    if #list > MAX_HOSTS then fail(where, "%d hosts, over the bound of %d", #list, MAX_HOSTS) end
    for i, s in ipairs(list) do
      if not s:match("^[%w%.%-_@:%[%]]+$") or s:sub(1, 1) == "-" then
        fail(where .. "[" .. i .. "]", "%q is not a [user@]host[:port]", s)
      end
    end
    out.hosts, out.count = list, #list
  elseif kind == "mpirun" then
    if not decl.np then fail(where, "np is required (how many ranks)") end
    out.count = decl.np
  elseif kind == "srun" then
    if not decl.ntasks then fail(where, "ntasks is required (how many tasks)") end
    out.count = decl.ntasks
  end
  return out
end

local function pattern_of(p, i)
  local where = "patterns[" .. i .. "]"
  if type(p) == "function" then p = { scenario = p } end
  if type(p) == "string" then p = { p } end
  if type(p) ~= "table" then fail(where, "expected a pattern name, a table or a function, got %s", type(p)) end
  local kind = p.scenario and "scenario" or p[1]
  if not PATTERN[kind] or kind == "scenario" and p[1] then
    fail(where, "unknown pattern %s (pairwise, ring, bisection, one_to_all, or { scenario = " ..
      "function(ctx) ... end, name = ... })", tostring(p[1]))
  end
  if p[2] ~= nil then fail(where, "one name per pattern, got a second: %s", tostring(p[2])) end
  check_table(p, PATTERN[kind], where)
  local out = { kind = kind, index = i }
  for k, v in pairs(p) do if type(k) ~= "number" then out[k] = v end end
  if kind == "scenario" then
    out.label = p.name or ("scenario" .. i)
    if not out.label:match("^[%w_%-%.]+$") then fail(where .. ".name", "%q: use letters, digits, _ - .", out.label) end
  elseif kind == "ring" then
    out.order = p.order or "ordered"
    out.label = out.order == "random" and "ring_random" or "ring"
  else
    out.label = kind
  end
  return out
end

local function values_list(v, where)
  if type(v) ~= "table" then v = { v } end
  if not is_list(v) or #v == 0 then fail(where, "expected a non-empty list of values") end
  for j, x in ipairs(v) do
    local t = type(x)
    if t ~= "string" and t ~= "number" and t ~= "boolean" then
      fail(where .. "[" .. j .. "]", "expected a string, number or boolean, got %s", t)
    end
  end
  return v
end

local function sizes_of(v)
  if type(v) == "string" then
    local list, err = perf.parse_sizes(v)
    if not list then fail("axes.size", "%s", err) end
    return list
  end
  v = values_list(v, "axes.size")
  local out = {}
  for j, x in ipairs(v) do
    if type(x) == "string" then
      local one, err = perf.parse_sizes(x)
      if not one or #one ~= 1 then fail("axes.size[" .. j .. "]", "%s", err or "one size per entry") end
      x = one[1]
    end
    if not int(x, 1, 2 ^ 31) then fail("axes.size[" .. j .. "]", "expected a byte count 1 B .. 2 GiB, got %s", tostring(x)) end
    out[#out + 1] = x
  end
  return out
end

local function faults_of(v)
  if type(v) ~= "table" or is_list(v) and #v > 0 then
    fail("axes.faults", "expected a table { drop = { 0, 0.001, 0.01 }, ... }")
  end
  local out = {}
  for k, list in pairs(v) do
    if type(k) ~= "string" or not k:match("^[%a_][%w_]*$") then
      fail("axes.faults", "fault names are identifiers, got %s", tostring(k))
    end
    list = values_list(list, "axes.faults." .. k)
    for j, x in ipairs(list) do
      if type(x) ~= "number" and type(x) ~= "string" then
        fail("axes.faults." .. k .. "[" .. j .. "]", "expected a number or a string such as \"200us\"")
      end
    end
    out[#out + 1] = { name = k, values = list }
  end
  table.sort(out, function(a, b) return a.name < b.name end)
  return out
end

M.RESERVED_AXES = { size = true, faults = true, repetitions = true, pattern = true, rep = true }

-- Check a loaded description; returns the normalized spec.
function M.check(desc, path)
  check_table(desc, TOP, "matrix")
  if not desc.hosts then fail("matrix", "hosts is required") end
  if not desc.patterns then fail("matrix", "patterns is required (e.g. { \"pairwise\" })") end
  local spec = { name = desc.name or (path and path:match("([^/]+)%.lua$")) or "matrix",
    description = desc.description, path = path, filter = desc.filter, timeout = desc.timeout or 60,
    launch_timeout = desc.launch_timeout or 30, seed = desc.seed or 1, liveness = desc.liveness or 15 }
  spec.hosts = check_hosts(desc.hosts)
  if not is_list(desc.patterns) or #desc.patterns == 0 then
    fail("patterns", "expected a non-empty list")
  end
  spec.patterns = {}
  local labels = {}
  for i, p in ipairs(desc.patterns) do
    local pat = pattern_of(p, i)
    if labels[pat.label] then fail("patterns[" .. i .. "]", "a second pattern labelled %s", pat.label) end
    labels[pat.label] = true
    spec.patterns[i] = pat
  end
  spec.link = {}
  for k, v in pairs(desc.link or {}) do
    if type(k) ~= "string" then fail("link", "option names are strings, got %s", tostring(k)) end
    spec.link[k] = v
  end
  local m = check_table(desc.measure or {}, MEASURE, "measure")
  spec.measure = {}
  for k, v in pairs(M.MEASURE_DEFAULTS) do spec.measure[k] = v end
  for k, v in pairs(m) do spec.measure[k] = v end
  local axes = desc.axes or {}
  if type(axes) ~= "table" then fail("axes", "expected a table") end
  spec.axes, spec.faults, spec.reps = {}, {}, 1
  spec.sizes = { 4096 }
  for k, v in pairs(axes) do
    if type(k) ~= "string" or not k:match("^[%a_][%w_]*$") then
      fail("axes", "axis names are identifiers, got %s", tostring(k))
    end
    if k == "size" then
      spec.sizes = sizes_of(v)
    elseif k == "faults" then
      spec.faults = faults_of(v)
    elseif k == "repetitions" then
      if not int(v, 1, 1000) then fail("axes.repetitions", "expected an integer 1..1000, got %s", tostring(v)) end
      spec.reps = v
    elseif M.RESERVED_AXES[k] then
      fail("axes." .. k, "is not an axis (patterns are listed in `patterns`)")
    else
      if spec.link[k] ~= nil then fail("axes." .. k, "is also a fixed option in `link`") end
      spec.axes[#spec.axes + 1] = { name = k, values = values_list(v, "axes." .. k) }
    end
  end
  table.sort(spec.axes, function(a, b) return a.name < b.name end)
  return spec
end

-- Run the text of a matrix file; returns the description table it returns.
function M.eval(text, chunkname)
  if type(text) ~= "string" then return nil, "matrix file: no text" end
  if #text > M.MAX_TEXT then
    return nil, string.format("matrix file %s: %d bytes, over the %d-byte bound", chunkname, #text, M.MAX_TEXT)
  end
  local f, err = loadstring(text, "@" .. chunkname)
  if not f then return nil, "matrix file: " .. err end
  local ok, desc = pcall(f)
  if not ok then return nil, "matrix file " .. chunkname .. ": " .. tostring(desc) end
  if type(desc) ~= "table" then
    return nil, string.format("matrix file %s: must return a table (the matrix), returned %s",
      chunkname, type(desc))
  end
  return desc
end

-- Load and check: spec, or nil, "matrix file PATH: where: what".
function M.load_text(text, path)
  local desc, err = M.eval(text, path)
  if not desc then return nil, err end
  local ok, spec = pcall(M.check, desc, path)
  if not ok then
    if type(spec) == "table" and spec.matrix_error then
      return nil, "matrix file " .. path .. ": " .. spec.matrix_error
    end
    error(spec, 0)
  end
  spec.text = text
  return spec
end

function M.load(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, "matrix file: " .. err end
  local text = f:read(M.MAX_TEXT + 1)
  f:close()
  return M.load_text(text or "", path)
end

-- The axis names and fixed link options this tbrt's links do not know.
function M.unknown_link_options(spec)
  local link = require("tbrt.link")
  local out = {}
  local function try(k, v)
    local ok, err = pcall(link.check_opts, { [k] = v })
    if not ok and tostring(err):find("unknown link option", 1, true) then out[#out + 1] = k end
  end
  for _, a in ipairs(spec.axes) do try(a.name, a.values[1]) end
  for k, v in pairs(spec.link) do try(k, v) end
  table.sort(out)
  return out
end

return M
