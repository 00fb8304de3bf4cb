-- pattern.lua - the message pattern of the Lua benchmarks, the same bytes
-- as bench_common.c's bench_fill: 8-byte words (little endian) that all
-- differ (word k = BASE + k * STEP mod 2^64, STEP odd), so a piece placed
-- at a wrong offset shows, where a pattern of period p hides a shift by a
-- multiple of p.
--
--   local pattern = dofile(arg[0]:gsub("[^/]*$", "") .. "pattern.lua")
--   pattern(n) -> a uint8_t[max(n, 8)] holding the pattern's first n bytes
local ffi = require("ffi")

local BASE, STEP = 0x6a09e667f3bcc909ULL, 0x9e3779b97f4a7c15ULL

return function(n)
  local words = math.floor((math.max(n, 8) + 7) / 8)
  local w = ffi.new("uint64_t[?]", words)
  for k = 0, words - 1 do w[k] = BASE + k * STEP end
  local b = ffi.new("uint8_t[?]", math.max(n, 8))
  ffi.copy(b, w, math.max(n, 8))
  return b
end
