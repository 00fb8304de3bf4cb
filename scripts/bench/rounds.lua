-- rounds.lua - figures measured in rounds, for `make bench` (scripts/bench.lua
-- and its parts): one round runs each figure of a group once, back to back;
-- a figure is the median of its rounds, and the ratio of two figures is the
-- median over the rounds of their ratio within each round. On a shared
-- machine (a VM whose host moves its vCPUs) the speed changes from one
-- minute to the next: a ratio of two medians taken minutes apart would
-- compare two different machines.
--
--   local rounds = dofile("scripts/bench/rounds.lua")(r, runs [, log])
--       log(line): where each figure's "# label median (n runs)" goes (stderr)
--   rounds.group({ {key, label, fn [, bracket = true]}, ... })
--       fn() -> number, or nil, why; r[key] = the median of its runs (nil
--       when none gave a figure). A bracketing figure (an anchor) is taken
--       twice a round, first and last, and the round's figure is the mean of
--       the two: every figure of the round then lies between its anchor's
--       two takes, and a machine that changed speed during the round moves
--       both sides of a ratio alike.
--   rounds.paired(a, b) -> the median of a/b over rounds with both, or nil;
--       and the list of those ratios
--   rounds.row(label, a, b, anchor_is, cmp, target) -> a row of bench.lua's
--       table: figures a (tbrt's) and b (the anchor's), their paired ratio
--       (ratio =) and each round's (ratios =: the table shows their range)
--   rounds.ratio_of(row) -> the row's ratio: paired (ratio =), else a / b
--   rounds.verdict(row) -> "meets >= 1 (4 of 5 rounds)": the target against
--       the row's ratio, and in how many rounds it held (a median that
--       meets while rounds miss is met on that machine some of the time);
--       "(information)" for a row without a target, "" without a ratio
--   rounds.median(list)
local function median(list)
  local t = {}
  for i, v in ipairs(list) do t[i] = v end
  table.sort(t)
  local n = #t
  if n == 0 then return nil end
  return n % 2 == 1 and t[(n + 1) / 2] or (t[n / 2] + t[n / 2 + 1]) / 2
end

return function(r, runs, log)
  log = log or function(line) io.stderr:write(line) end
  local vals = {}               -- vals[key][round] = figure, or false
  local self = { median = median, vals = vals }

  function self.group(list)
    local why = {}
    for _, m in ipairs(list) do vals[m[1]] = {} end
    local function take(m, i, v, w)
      vals[m[1]][i] = v or false
      if not v then why[m[1]] = w end
    end
    for i = 1, runs do
      local first = {}
      for _, m in ipairs(list) do
        if m.bracket then first[m] = { m[3]() } end
      end
      for _, m in ipairs(list) do
        if not m.bracket then take(m, i, m[3]()) end
      end
      for _, m in ipairs(list) do
        if m.bracket then
          local a, b, w = first[m][1], m[3]()
          take(m, i, a and b and (a + b) / 2 or nil, w or first[m][2])
        end
      end
    end
    for _, m in ipairs(list) do
      local ok = {}
      for _, v in ipairs(vals[m[1]]) do if v then ok[#ok + 1] = v end end
      r[m[1]] = median(ok)
      log(string.format("# %-34s %s\n", m[2], r[m[1]] and
        string.format("%.4g (%d runs)", r[m[1]], #ok) or ("NA: " .. tostring(why[m[1]]))))
    end
  end

  function self.paired(a, b)
    local q = {}
    for i = 1, runs do
      local x, y = vals[a] and vals[a][i], vals[b] and vals[b][i]
      if x and y and y ~= 0 then q[#q + 1] = x / y end
    end
    return median(q), q
  end

  -- a row's ratio: the median of its paired rounds, else its two figures'
  function self.ratio_of(row)
    return row.ratio or (row[2] and row[3] and row[3] ~= 0 and row[2] / row[3]) or nil
  end

  function self.verdict(row)
    local cmp, want = row[5], row[6]
    if not cmp then return "(information)" end
    local q = self.ratio_of(row)
    if not q then return "" end
    local function holds(v) return cmp == "<=" and v <= want or cmp == ">=" and v >= want end
    local text = string.format("%s %s %s", holds(q) and "meets" or "misses", cmp, want)
    local list = row.ratios
    if list and #list >= 2 then
      local n = 0
      for _, v in ipairs(list) do if holds(v) then n = n + 1 end end
      text = text .. string.format(" (%d of %d rounds)", n, #list)
    end
    return text
  end

  function self.row(label, a, b, is, cmp, target)
    local q, list = self.paired(a, b)
    return { label, r[a], r[b], is, cmp, target, ratio = q, ratios = list }
  end

  return self
end
