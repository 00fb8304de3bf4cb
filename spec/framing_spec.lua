-- framing_spec.lua - the engine's stride rings: sizes at the stride edges,
-- coalescing, partial reads, frames broken on purpose, and a full ring.
local ffi = require("ffi")
local core = require("tbrt.ffi")
local L = require("links")

local C = core.C
local STRIDE = 128 * 1024
local HDR = C.TBRT_STRIDE_HDR
local PAYLOAD = STRIDE - HDR

for _, pers in ipairs { "apple-uc", "linux-rc" } do
  describe("framing on soft " .. pers, function()
    local a, b
    before_each(L.async(function()
      a, b = L.pair({ device = "soft", personality = pers })
      assert(a and b, "pair")
    end))
    after_each(L.async(function()
      if a then a:close() end
      if b then b:close() end
    end))

    it("moves payloads at the stride edges intact, in the right number of frames", L.async(function()
      for _, n in ipairs { 1, PAYLOAD - 1, PAYLOAD, PAYLOAD + 1, STRIDE - 8, STRIDE - 7,
        STRIDE + 1, 2 * PAYLOAD + 3 } do
        local before = b:stats().frames_recv
        local buf = L.pattern(n, n % 251)
        assert(a:send(buf, n)) ; assert(a:flush())
        local out = ffi.new("uint8_t[?]", n)
        assert.equal(n, b:recv_into(out, n, 5))
        assert.is_nil(L.check(out, n, n % 251), "size " .. n)
        assert.equal(math.ceil(n / PAYLOAD), b:stats().frames_recv - before, "frames for " .. n)
        assert.equal(0, C.tbrt_link_readable(b._l), "nothing left over after " .. n)
      end
    end))

    it("coalesces many small sends into one frame until flush", L.async(function()
      local before = a:stats().frames_sent
      local buf = L.pattern(100000)
      for off = 0, 99999, 100 do assert(a:send(buf + off, 100)) end
      assert.equal(before, a:stats().frames_sent, "nothing posted before the flush")
      assert(a:flush())
      assert.equal(before + 1, a:stats().frames_sent)
      local out = ffi.new("uint8_t[100000]")
      assert.equal(100000, b:recv_into(out, 100000, 5))
      assert.is_nil(L.check(out, 100000))
    end))

    it("hands out partial reads and keeps the rest", L.async(function()
      assert(a:send("hello, partial world")) ; assert(a:flush())
      assert.equal("hello", b:recv(5, 5))
      assert.equal(", ", b:recv(2, 5))
      assert.equal("partial world", b:recv_some(100, 5))
      local data, err, partial = b:recv(4, 0.05)
      assert.is_nil(data)
      assert.matches("^ETIMEDOUT: link %d+: recv: 0 of 4 bytes arrived", err)
      assert.equal("", partial)
      assert(a:send("tail")) ; assert(a:flush())
      assert.equal("tail", b:recv(4, 5))
    end))

    for what, pattern in pairs {
      magic = "^EPROTO: link %d+: recv: frame magic 0xbadf00d != TBRT %(stream desynced",
      length = "^EPROTO: link %d+: recv: frame length " .. (PAYLOAD + 1) .. " exceeds the stride payload " .. PAYLOAD,
      skip = "^EPROTO: link %d+: recv: frame seq 3 != expected 2 %(a frame was dropped on the wire%)",
      ["repeat"] = "^EPROTO: link %d+: recv: frame seq 1 != expected 2 %(a frame was repeated on the wire%)",
    } do
      it("breaks the link on a bad frame: " .. what, L.async(function()
        assert(a:send("first")) ; assert(a:flush())
        assert.equal("first", b:recv(5, 5))
        assert(a:inject(what))
        assert(a:send("second")) ; assert(a:flush())
        local data, err = b:recv(6, 5)
        assert.is_nil(data)
        assert.matches(pattern, err)
        -- it stays broken, with the same message
        local _, again = b:recv(1, 1)
        assert.equal(err, again)
      end))
    end

    it("returns EAGAIN when the ring is full and recovers after the reader drains it", L.async(function()
      local l = a._l
      local chunk = 64 * 1024
      local buf = L.pattern(chunk)
      local accepted, eagain = 0, false
      for _ = 1, 1000 do
        local n = tonumber(C.tbrt_link_send(l, buf, chunk))
        if n == -11 then eagain = true break end
        assert.is_true(n > 0, "send: " .. n)
        accepted = accepted + n
        C.tbrt_link_flush(l)
        C.tbrt_link_progress(l)
      end
      assert.is_true(eagain, "a ring that nobody drains fills up")
      -- at most both rings' worth is in flight
      assert.is_true(accepted <= 2 * 16 * PAYLOAD + chunk, "accepted " .. accepted)
      assert.is_true(a:stats().eagain >= 1)
      assert.equal(0, C.tbrt_link_writable(l))
      local out = ffi.new("uint8_t[?]", accepted)
      local got = 0
      while got < accepted do
        local n = assert(b:recv_into(out + got, accepted - got, 5, true))
        got = got + n
        C.tbrt_link_progress(l)
      end
      for i = 0, 9 do C.tbrt_link_progress(l) end
      assert.equal(1, C.tbrt_link_writable(l), "writable again once drained")
      assert.is_true(tonumber(C.tbrt_link_send(l, buf, chunk)) > 0)
    end))
  end)
end

describe("framing mismatches", function()
  it("apple-uc with variable framing breaks on the frame-count rule", L.async(function()
    local a, b = L.pair({ device = "soft", personality = "apple-uc", framing = "variable" })
    assert(a:send("short")) ; assert(a:flush())
    local data, err = b:recv(5, 5)
    assert.is_nil(data)
    assert.matches("^EIO: link %d+: recv completion: IBV_WC_LOC_LEN_ERR .*different numbers of 4 KiB frames", err)
    a:close() ; b:close()
  end))

  it("fixed on one side, variable on the other, is named", L.async(function()
    local a, b = L.pair({ device = "soft", personality = "linux-rc", framing = "variable" },
      { device = "soft", personality = "linux-rc", framing = "fixed" })
    assert(a:send("x")) ; assert(a:flush())
    local data, err = b:recv(1, 5)
    assert.is_nil(data)
    assert.matches("do both sides use the same framing%?", err)
    a:close() ; b:close()
  end))
end)
