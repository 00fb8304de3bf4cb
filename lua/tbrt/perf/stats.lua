-- tbrt/perf/stats.lua - latency samples to the figures perftest reports:
-- min, median ("typical"), mean, p99, p99.9, max and standard deviation.
--
--   local s = stats.summarize({ 2.1, 2.0, 9.5 })   -- { n, min, typical, mean, p99, p99_9, max, stdev }
--   local s = stats.from_timestamps(ts, n, scale)  -- sample k = (ts[k+1] - ts[k]) * scale
--
-- The median of an even count is the mean of the two middle samples (as
-- perftest's); percentiles are nearest-rank: the sample at rank
-- ceil(q * n) of the sorted list, so p99 of 100 samples is the 99th and of
-- 20 samples the 20th (the max: too few samples to leave one out). The
-- standard deviation is the population's (divided by n). Every sample is
-- kept: none is dropped as an outlier.
local M = {}

-- Rank ceil(n * num / den) in exact integer arithmetic (0.99 * 100 is not
-- 99 in binary floating point).
local function rank(n, num, den)
  return math.max(1, math.floor((n * num + den - 1) / den))
end

-- s: a list of numbers (sorted in place). nil for an empty list.
function M.summarize(s)
  local n = #s
  if n == 0 then return nil end
  local sum = 0
  for i = 1, n do sum = sum + s[i] end
  local mean = sum / n
  local var = 0
  for i = 1, n do
    local d = s[i] - mean
    var = var + d * d
  end
  table.sort(s)
  local mid = math.floor(n / 2)
  local typical = n % 2 == 1 and s[mid + 1] or (s[mid] + s[mid + 1]) / 2
  return { n = n, min = s[1], typical = typical, mean = mean, p99 = s[rank(n, 99, 100)],
    p99_9 = s[rank(n, 999, 1000)], max = s[n], stdev = math.sqrt(var / n) }
end

-- ts: n + 1 timestamps (a cdata array or a 0-based table); sample k is
-- (ts[k+1] - ts[k]) * scale.
function M.from_timestamps(ts, n, scale)
  local s = {}
  for k = 0, n - 1 do s[k + 1] = (ts[k + 1] - ts[k]) * scale end
  return M.summarize(s)
end

return M
