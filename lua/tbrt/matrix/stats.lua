-- tbrt/matrix/stats.lua - small statistics over lists of numbers (nil and
-- NaN left out): what the summary, the plots and diff need.
local M = {}

local function clean(list)
  local out = {}
  for _, v in ipairs(list) do if type(v) == "number" and v == v then out[#out + 1] = v end end
  return out
end
M.clean = clean

function M.mean(list)
  list = clean(list)
  if #list == 0 then return nil end
  local s = 0
  for _, v in ipairs(list) do s = s + v end
  return s / #list
end

-- Sample standard deviation (n - 1); nil below two values.
function M.stdev(list)
  list = clean(list)
  if #list < 2 then return nil end
  local m = M.mean(list)
  local s = 0
  for _, v in ipairs(list) do s = s + (v - m) ^ 2 end
  return math.sqrt(s / (#list - 1))
end

-- The p-th percentile (0..100), linear between closest ranks.
function M.percentile(list, p)
  list = clean(list)
  if #list == 0 then return nil end
  table.sort(list)
  local pos = (#list - 1) * p / 100 + 1
  local lo = math.floor(pos)
  local hi = math.min(lo + 1, #list)
  return list[lo] + (list[hi] - list[lo]) * (pos - lo)
end

function M.median(list) return M.percentile(list, 50) end

function M.min(list)
  list = clean(list)
  local m
  for _, v in ipairs(list) do if not m or v < m then m = v end end
  return m
end

function M.max(list)
  list = clean(list)
  local m
  for _, v in ipairs(list) do if not m or v > m then m = v end end
  return m
end

return M
