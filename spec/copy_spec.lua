-- copy_spec.lua - the core's bulk copy (util/copy.h): the piecewise copy
-- that steps around glibc's REP MOVSB cliff copies every byte and nothing
-- else (build/test/bulk-copy: the copy is internal to the library), and
-- messages from and into buffers at every offset that meets the cliff
-- arrive intact through a link (sends into the ring, receives out of it,
-- the soft device's copies between them).
local ffi = require("ffi")
local H = require("helpers")
local L = require("links")

describe("the core's bulk copy", function()
  it("copies exactly n bytes, any size, any skew, pieces or not, and writes nothing around them", function()
    local r = H.run(H.build .. "/test/bulk-copy", {}, { timeout = 60 })
    assert.equal(0, r.code, H.describe(r))
    assert.matches("^checked %d+\n$", r.stdout)
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
