-- udp_crc_spec.lua - the UDP wire's CRC-32 (core/soft/wire/udp/udp_crc.c):
-- every way this CPU has (tables, 128-bit and 256-bit carry-less folds)
-- gives IEEE 802.3's CRC, the standard check value and the tables' result
-- for every length 0..2100 (the folds' edges) from several alignments and
-- start registers; the wire uses the fastest one (build/test/udp-crc: the
-- ways are internal to the library).
local H = require("helpers")

describe("the UDP wire's CRC-32", function()
  it("is IEEE 802.3's every way this CPU has, and the wire uses the fastest", function()
    local r = H.run(H.build .. "/test/udp-crc", {}, { timeout = 60 })
    assert.equal(0, r.code, H.describe(r))
    local out = r.stdout
    local present = {}
    for _, way in ipairs { "table", "pclmul", "vpclmul" } do
      if not out:match("\n" .. way .. " absent\n") then
        local check, bad = out:match("\n" .. way .. " check (0x%x+) mismatches (%d+)\n")
        assert.equal("0xcbf43926", check, way .. ": " .. out)
        assert.equal("0", bad, way .. ": " .. out)
        present[#present + 1] = way
      end
    end
    assert.equal("table", present[1])
    assert.equal(present[#present], out:match("^used (%w+)\n"), "the fastest way: " .. out)
    assert.matches("\nudp_crc32 agrees\n", out)
  end)
end)
