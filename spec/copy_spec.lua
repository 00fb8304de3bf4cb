-- copy_spec.lua - the core's bulk copy (util/copy.h): the piecewise copy
-- that steps around glibc's REP MOVSB cliff copies every byte and nothing
-- else, and messages from and into buffers at every offset that meets the
-- cliff arrive intact through a link (sends into the ring, receives out of
-- it, the soft device's copies between them).
local ffi = require("ffi")
local core = require("tbrt.ffi")
local L = require("links")

ffi.cdef [[ void tbrt_copy_pieces(void *dst, const void *src, size_t n); ]]
local C = core.C

describe("tbrt_copy's piecewise copy", function()
  it("copies exactly n bytes, any size, any skew, and writes nothing around them", function()
    local SPAN = 70000
    local src = L.pattern(SPAN + 64, 3)
    local dst = ffi.new("uint8_t[?]", SPAN + 256)
    for _, n in ipairs { 0, 1, 63, 1023, 1024, 1025, 2047, 2048, 4096 + 7, 65536, 65536 + 13 } do
      for _, skew in ipairs { 0, 1, 8, 16, 31, 63 } do
        ffi.fill(dst, SPAN + 256, 0xee)
        C.tbrt_copy_pieces(dst + 64 + skew, src + 5, n)
        for i = 0, 63 + skew do
          assert(dst[i] == 0xee, "wrote before the destination: n " .. n .. " skew " .. skew)
        end
        for i = 0, n - 1 do
          if dst[64 + skew + i] ~= src[5 + i] then
            error("byte " .. i .. " of " .. n .. " wrong (skew " .. skew .. ")")
          end
        end
        for i = 64 + skew + n, 64 + skew + n + 127 do
          assert(dst[i] == 0xee, "wrote past the end: n " .. n .. " skew " .. skew)
        end
      end
    end
  end)
end)

describe("messages from and into skewed buffers", function()
  for _, pers in ipairs { "linux-rc", "apple-uc" } do
    it("arrive intact whichever offsets the two buffers have, soft " .. pers, L.async(function()
      local a, b = L.pair({ device = "soft", personality = pers })
      finally(function() a:close() b:close() end)
      local N = 65536 + 100
      local src = ffi.new("uint8_t[?]", N + 4096)
      local out = ffi.new("uint8_t[?]", N + 4096)
      local base_s = 4096 - tonumber(ffi.cast("uintptr_t", src) % 4096)
      local base_o = 4096 - tonumber(ffi.cast("uintptr_t", out) % 4096)
      for _, so in ipairs { 0, 8, 24 } do
        for _, oo in ipairs { 0, 1, 16, 31, 40, 63 } do
          local seed = (so * 64 + oo) % 251
          local s = src + (base_s + so) % 4096
          local p = L.pattern(N, seed)
          ffi.copy(s, p, N)
          assert(a:send(s, N)) ; assert(a:flush())
          local o = out + (base_o + oo) % 4096
          local got = 0
          while got < N do got = got + assert(b:recv_into(o + got, N - got, 5)) end
          assert.is_nil(L.check(o, N, seed), "offsets " .. so .. " / " .. oo)
        end
      end
    end))
  end
end)
