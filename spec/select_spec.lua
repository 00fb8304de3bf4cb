-- select_spec.lua - how a link chooses its device, port and GID, and what
-- it says when nothing fits.
local uv = require("luv")
local tbrt = require("tbrt")
local L = require("links")
local V = require("verbs_helpers")

describe("device selection", function()
  it("picks port 2 on apple-uc (port 1 is DOWN) and the GID of the bootstrap address", L.async(function()
    local a, b = L.pair({ device = "soft", personality = "apple-uc" })
    local i = a:info()
    local lo = V.loopback_index("soft0", 2)
    assert.equal(2, i.port)
    assert.equal(lo, i.gid_index)
    assert.matches("port 2 %(port 1 DOWN%), GID%[" .. lo .. "%] ::ffff:127%.0%.0%.1 matches the " ..
      "bootstrap address", i.why_device)
    a:close() ; b:close()
  end))

  it("picks the first ACTIVE port, whichever it is", L.async(function()
    local a, b = L.pair({ device = "soft", personality = "apple-uc", ports = "active,active" })
    assert.equal(1, a:info().port)
    a:close() ; b:close()
  end))

  it("prefers the RoCE v2 entry where GID types exist", L.async(function()
    local a, b = L.pair({ device = "soft", personality = "linux-rc" })
    local i = a:info()
    local lo = V.loopback_index("soft1", 1)
    assert.equal(lo, i.gid_index)
    assert.equal(1, lo % 2, "v2 is the second of each address's pair")
    assert.matches("RoCEv2 matches", i.why_device)
    a:close() ; b:close()
  end))

  it("honours an explicit gid_index and rejects an empty one", L.async(function()
    local a, b = L.pair({ device = "soft", personality = "linux-rc", gid_index = 1 })
    assert.equal(1, a:info().gid_index)
    assert.matches("given gid_index", a:info().why_device)
    assert(a:send("via gid 1")) ; assert(a:flush())
    assert.equal("via gid 1", b:recv(9, 5))
    a:close() ; b:close()
    local x, y, xerr = L.pair({ device = "soft", personality = "linux-rc", gid_index = 200, fallback = false },
      { device = "soft", personality = "linux-rc" })
    assert.is_nil(x)
    assert.matches("port 1 GID%[200%] %(TBRT_GID_INDEX/gid_index%) is empty", xerr)
    if y then y:close() end
  end))

  it("takes the device and GID index from the environment", L.async(function()
    uv.os_setenv("TBRT_DEVICE", "tcp")
    local a, b = L.pair({})
    uv.os_unsetenv("TBRT_DEVICE")
    assert.equal("tcp", a:info().kind)
    a:close() ; b:close()
    uv.os_setenv("TBRT_GID_INDEX", "0")
    a, b = L.pair({ device = "soft", personality = "linux-rc" })
    uv.os_unsetenv("TBRT_GID_INDEX")
    assert.equal(0, a:info().gid_index)
    a:close() ; b:close()
  end))

  it("explains 'auto' when it falls back to the software device", L.async(function()
    local a, b = L.pair({ device = "auto" })
    assert.equal("soft", a:info().kind)
    assert.matches("^auto: soft0 .*no real RDMA device has an ACTIVE port", a:info().why_device)
    a:close() ; b:close()
  end))

  it("names an unknown device and lists why each candidate was rejected", L.async(function()
    local x, y, err = L.pair({ device = "nosuchdev0", fallback = false }, { device = "soft" })
    assert.is_nil(x)
    assert.matches("^ENODEV: link %d+: probe: no device named \"nosuchdev0\"", err)
    if y then y:close() end
    x, y, err = L.pair({ device = "soft", ports = "down,down", fallback = false }, { device = "soft" })
    assert.is_nil(x)
    assert.matches("soft0: no ACTIVE port %(port 1 DOWN, port 2 DOWN%)", err)
    if y then y:close() end
  end))

  it("lists every device with its personality, and why an unusable one is unusable", function()
    local list = tbrt.devices()
    local by = {}
    for _, d in ipairs(list) do by[d.name] = d end
    assert.equal("apple-uc", by.soft0.personality)
    assert.equal("linux-rc", by.soft1.personality)
    assert.is_true(by.soft0.usable)
    for _, d in ipairs(list) do
      if not d.usable then assert.is_true(#d.why > 0, d.name .. " says why") end
    end
  end)
end)
