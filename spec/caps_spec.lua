-- caps_spec.lua - the 24-byte caps blob: both layouts round trip, all-zero
-- caps keep both sides on TCP, and garbage is an error with a reason on
-- decode and during activation (where the peer fails with us).
local caps = require("tbrt.caps")
local tbrt = require("tbrt")
local L = require("links")

local GID = string.rep("\0", 10) .. "\255\255\127\0\0\1"

describe("caps", function()
  it("round-trips the Apple layout (qpn, lid, reserved, gid)", function()
    local blob = assert(caps.encode{ flavor = "apple", qpn = 0x123456, lid = 0xbeef, gid = GID })
    assert.equal(24, #blob)
    assert.equal("\x56\x34\x12\x00\xef\xbe\x00\x00", blob:sub(1, 8), "little endian, as llama.cpp")
    local c = assert(caps.decode(blob, "apple"))
    assert.same({ flavor = "apple", qpn = 0x123456, psn = 0, lid = 0xbeef, gid = GID }, c)
  end)

  it("round-trips the Linux layout (qpn, psn, gid)", function()
    local blob = assert(caps.encode{ flavor = "linux", qpn = 77, psn = 0xabcdef, gid = GID })
    assert.equal("\x4d\x00\x00\x00\xef\xcd\xab\x00", blob:sub(1, 8))
    local c = assert(caps.decode(blob, "linux"))
    assert.same({ flavor = "linux", qpn = 77, psn = 0xabcdef, lid = 0, gid = GID }, c)
  end)

  it("reads all-zero caps as no RDMA", function()
    assert.equal("none", assert(caps.decode(caps.NONE, "apple")).flavor)
    assert.equal("none", assert(caps.decode(caps.NONE, "linux")).flavor)
  end)

  it("rejects garbage with the reason", function()
    local function bad(blob, flavor, pattern)
      local c, err = caps.decode(blob, flavor)
      assert.is_nil(c)
      assert.matches("^EINVAL: caps: " .. pattern, err)
    end
    bad(string.rep("\1", 23), "linux", "23 bytes, expected 24")
    bad(string.rep("\255", 24), "linux", "qpn 0xffffffff exceeds 24 bits")
    bad("\1\0\0\0" .. string.rep("\0", 4) .. GID, "linux", "qpn 1 is a special QP")
    bad("\5\0\0\0\1\0\0\0" .. string.rep("\0", 16), "linux", "qpn 5 with an all%-zero GID")
    bad("\5\0\0\0\0\0\0\0\255" .. string.rep("\2", 15), "linux", "GID ff02:.* is multicast")
    bad("\5\0\0\0\0\0\0\1" .. GID, "linux", "psn 0x1000000 exceeds 24 bits")
    -- Linux caps (psn where Apple keeps a reserved zero) read in Apple mode
    local linux = assert(caps.encode{ flavor = "linux", qpn = 9, psn = 0x50000, gid = GID })
    bad(linux, "apple", "reserved field 0x0005 is not zero %(Linux%-layout caps")
  end)

  it("keeps both sides on TCP when one has no RDMA (all-zero caps)", L.async(function()
    local a, b = L.pair({ device = "tcp" }, { device = "soft" })
    assert(a, "connect") ; assert(b, "accept")
    assert.equal("tcp", a:info().kind)
    assert.equal("tcp", b:info().kind)
    assert.matches("all%-zero caps", b:info().why_device)
    assert(a:send("over tcp")) ; assert(a:flush())
    assert.equal("over tcp", b:recv(8, 5))
    a:close() ; b:close()
  end))

  it("falls back to TCP when no RDMA device is usable, unless told not to", L.async(function()
    local a, b = L.pair({ device = "soft", ports = "down,down" })
    assert(a and b)
    assert.equal("tcp", a:info().kind)
    assert.matches("no ACTIVE port %(port 1 DOWN, port 2 DOWN%)", a.fallback_why)
    a:close() ; b:close()
    local x, y, xerr = L.pair({ device = "soft", ports = "down,down", fallback = false },
      { device = "soft" })
    assert.is_nil(x)
    assert.matches("^ENODEV: link %d+: probe: no usable RDMA device: soft0: .*no ACTIVE port", xerr)
    if y then y:close() end
  end))

  it("fails both sides when one side gets garbage caps", L.async(function()
    local garbage = function(sock, mine, role, timeout)
      local peer, err = caps.exchange(sock, mine, role, timeout)
      if not peer then return nil, err end
      if role == "client" then return "\255\255\255\255" .. peer:sub(5) end
      return peer
    end
    local a, b, aerr, berr = L.pair({ device = "soft", exchange = garbage })
    assert.is_nil(a)
    assert.is_nil(b)
    assert.matches("^EINVAL: link %d+: activate: caps: qpn 0xffffffff exceeds 24 bits", aerr)
    assert.matches("^ECONNREFUSED: link %d+: readiness: the peer failed to activate", berr)
  end))
end)
