-- tbrt/matrix/cells.lua - the cells of a matrix: the product of its
-- patterns, link-option axes, fault levels, sizes and repetitions, less
-- what the file's filter and the command line's --only leave out.
--
--   local list = assert(cells.expand(spec, cells.parse_only("device=tcp,size=4K|64K")))
--   list[i] = { index, key, label, pattern, params, opts, faults, size, rep, timeout }
--
-- The order is stable: repetitions outermost (so the repetitions of one
-- cell are spread over the run and their spread says something about the
-- noise), then patterns, link axes (sorted by name), faults, sizes. A
-- cell's key names every parameter ("pattern=ring device=tcp drop=0.01
-- size=4096 rep=2"): it is how results, --resume, --only and diff know a
-- cell, so it does not depend on the order of anything in the file.
local perf = require("tbrt.perf")

local M = {}

local function fmt(v)
  if type(v) == "number" then
    if v % 1 == 0 and math.abs(v) < 2 ^ 53 then return string.format("%d", v) end
    return string.format("%.10g", v)
  end
  return tostring(v)
end
M.fmt = fmt

-- The parameters of a cell as name -> value, faults flattened: what
-- --only and the result files' columns see.
function M.flat_params(params)
  local out = {}
  for k, v in pairs(params) do
    if k == "faults" then
      for fk, fv in pairs(v) do out[fk] = fv end
    else
      out[k] = v
    end
  end
  return out
end

-- "pattern=X name=value ... size=N rep=R": pattern first, size and rep
-- last, the rest sorted.
function M.key(params)
  local flat = M.flat_params(params)
  local names = {}
  for k in pairs(flat) do
    if k ~= "pattern" and k ~= "size" and k ~= "rep" then names[#names + 1] = k end
  end
  table.sort(names)
  local parts = { "pattern=" .. fmt(flat.pattern) }
  for _, k in ipairs(names) do parts[#parts + 1] = k .. "=" .. fmt(flat[k]) end
  parts[#parts + 1] = "size=" .. fmt(flat.size)
  parts[#parts + 1] = "rep=" .. fmt(flat.rep)
  return table.concat(parts, " ")
end

-- The key without rep: cells that differ only by repetition.
function M.series_key(params)
  return (M.key(params):gsub(" rep=%S+$", ""))
end

-- --only "name=v1|v2,name2=v": every term must hold. Returns the parsed
-- filter, or nil and what is wrong.
function M.parse_only(text)
  if text == nil then return nil end
  local terms = {}
  for term in text:gmatch("[^,]+") do
    local name, vals = term:match("^%s*([%a_][%w_]*)%s*=%s*(.-)%s*$")
    if not name or vals == "" then
      return nil, string.format("--only: %q is not name=value[|value...] (e.g. device=tcp,size=4K|64K)", term)
    end
    local set = {}
    for v in vals:gmatch("[^|]+") do set[#set + 1] = v end
    terms[#terms + 1] = { name = name, values = set }
  end
  if #terms == 0 then return nil, "--only: empty filter" end
  return terms
end

local function value_matches(name, want, have)
  if fmt(have) == want then return true end
  if name == "size" then
    local list = perf.parse_sizes(want)
    return list ~= nil and #list == 1 and list[1] == have
  end
  if type(have) == "number" then return tonumber(want) == have end
  return false
end

local function only_matches(terms, flat)
  for _, t in ipairs(terms) do
    local any = false
    for _, v in ipairs(t.values) do
      if value_matches(t.name, v, flat[t.name]) then any = true break end
    end
    if not any then return false end
  end
  return true
end

-- All cells of spec (filters applied). Returns the list, or nil, err.
function M.expand(spec, only)
  if only then
    local known = { pattern = true, size = true, rep = true }
    for _, a in ipairs(spec.axes) do known[a.name] = true end
    for _, f in ipairs(spec.faults) do known[f.name] = true end
    for _, t in ipairs(only) do
      if not known[t.name] then
        local names = {}
        for k in pairs(known) do names[#names + 1] = k end
        table.sort(names)
        return nil, string.format("--only: %s is not a parameter of this matrix (its parameters: %s)",
          t.name, table.concat(names, ", "))
      end
    end
  end
  -- the link-axis and fault combinations, as lists of { name, value }
  local function product(dims)
    local out = { {} }
    for _, d in ipairs(dims) do
      local next_out = {}
      for _, combo in ipairs(out) do
        for _, v in ipairs(d.values) do
          local c = { unpack(combo) }
          c[#c + 1] = { d.name, v }
          next_out[#next_out + 1] = c
        end
      end
      out = next_out
    end
    return out
  end
  local link_combos, fault_combos = product(spec.axes), product(spec.faults)
  local list, seen = {}, {}
  for rep = 1, spec.reps do
    for _, pat in ipairs(spec.patterns) do
      for _, lc in ipairs(link_combos) do
        for _, fc in ipairs(fault_combos) do
          for _, size in ipairs(spec.sizes) do
            local params = { pattern = pat.label, size = size, rep = rep, faults = {} }
            local opts = {}
            for k, v in pairs(spec.link) do opts[k] = v end
            for _, nv in ipairs(lc) do params[nv[1]] = nv[2]; opts[nv[1]] = nv[2] end
            for _, nv in ipairs(fc) do params.faults[nv[1]] = nv[2] end
            local keep = true
            if spec.filter then
              local ok, r = pcall(spec.filter, params)
              if not ok then
                return nil, string.format("matrix file %s: filter failed on cell %s: %s",
                  spec.path or "?", M.key(params), tostring(r))
              end
              keep = r and true or false
            end
            if keep and only then keep = only_matches(only, M.flat_params(params)) end
            local key = M.key(params)
            if keep and not seen[key] then
              seen[key] = true
              local timeout = spec.timeout
              if type(timeout) == "function" then
                local ok, t = pcall(timeout, params)
                if not ok or type(t) ~= "number" or t <= 0 then
                  return nil, string.format("matrix file %s: timeout(cell) for %s gave %s, not seconds > 0",
                    spec.path or "?", key, ok and tostring(t) or tostring(t))
                end
                timeout = t
              end
              if pat.timeout then timeout = pat.timeout end
              list[#list + 1] = { index = #list + 1, key = key, pattern = pat, params = params,
                opts = opts, faults = params.faults, size = size, rep = rep, timeout = timeout }
            end
          end
        end
      end
    end
  end
  return list
end

return M
