-- tbrt/matrix/patterns.lua - who measures whom: the built-in patterns as
-- rounds of pairs. A round's pairs run at the same time; rounds run one
-- after another. In a pair { a, b }, a measures (drives perf.measure) and
-- b answers (perf.serve); both directions are measured on each link.
--
--   pairwise     every pair once, in n-1 rounds of n/2 disjoint pairs (the
--                circle method of round-robin tournaments; ClusterKit's
--                pairwise does the same), an odd count gives one host a bye
--   ring         one round: every host measures the next (ordered), or the
--                next in a random order (order = "random", a new order each
--                repetition, from the seed)
--   bisection    one round: a random half measures the other half, pair by pair
--   one_to_all   the root (default the first host) measures each other host,
--                one at a time (concurrent = true: all in one round)
--
-- Ranks are 0-based. Random orders come from a small LCG of our own, so a
-- seed gives the same order on every LuaJIT.
local M = {}

-- A deterministic shuffle of list (a copy) from seed.
function M.shuffle(list, seed)
  local out = { unpack(list) }
  local x = (seed % 2147483647) + 1
  for i = #out, 2, -1 do
    x = (x * 48271) % 2147483647             -- MINSTD
    local j = x % i + 1
    out[i], out[j] = out[j], out[i]
  end
  return out
end

local function ordered(a, b) if a < b then return { a, b } end return { b, a } end

function M.pairwise(ranks)
  local list = { unpack(ranks) }
  if #list < 2 then return {} end
  if #list % 2 == 1 then list[#list + 1] = false end    -- the bye
  local n = #list
  local rounds = {}
  for r = 1, n - 1 do
    local round = {}
    for i = 1, n / 2 do
      local a, b = list[i], list[n + 1 - i]
      if a and b then round[#round + 1] = ordered(a, b) end
    end
    rounds[r] = round
    -- keep the first fixed, rotate the rest by one
    local last = table.remove(list)
    table.insert(list, 2, last)
  end
  return rounds
end

function M.ring(ranks, order)
  local list = order or ranks
  if #list < 2 then return {} end
  local round = {}
  for i = 1, #list do round[i] = { list[i], list[i % #list + 1] } end
  return { round }
end

function M.bisection(ranks, seed)
  local list = M.shuffle(ranks, seed)
  local half = math.floor(#list / 2)
  local round = {}
  for i = 1, half do round[i] = { list[i], list[i + half] } end
  return { round }, list
end

function M.one_to_all(ranks, root, concurrent)
  root = root or ranks[1]
  local rounds, all = {}, {}
  for _, r in ipairs(ranks) do
    if r ~= root then
      if concurrent then all[#all + 1] = { root, r } else rounds[#rounds + 1] = { { root, r } } end
    end
  end
  if concurrent and #all > 0 then rounds[1] = all end
  return rounds
end

-- The rounds of a built-in pattern for ranks 0..n-1 in a repetition.
-- Returns rounds and, for random orders, the order used.
function M.rounds(pat, n, rep, seed)
  local ranks = {}
  for i = 1, n do ranks[i] = i - 1 end
  local s = ((pat.seed or seed or 1) * 7919 + (rep or 1)) % 2147483647
  if pat.kind == "pairwise" then return M.pairwise(ranks) end
  if pat.kind == "ring" then
    if pat.order == "random" then
      local order = M.shuffle(ranks, s)
      return M.ring(ranks, order), order
    end
    return M.ring(ranks)
  end
  if pat.kind == "bisection" then return M.bisection(ranks, s) end
  if pat.kind == "one_to_all" then
    if pat.root and pat.root >= n then
      error(string.format("pattern one_to_all: root %d, but the matrix has %d hosts", pat.root, n), 0)
    end
    return M.one_to_all(ranks, pat.root or 0, pat.concurrent)
  end
  error("patterns.rounds: not a built-in pattern: " .. tostring(pat.kind), 2)
end

return M
