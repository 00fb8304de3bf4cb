-- soft_faults_spec.lua - the fault hook between the soft device's objects
-- and its wire (core/soft/wire/faults.h), through the shared-memory wire:
-- TBRT_FAULTS="drop=P%,seed=S" loses UC and UD messages (their sends still
-- complete, as UC never reports loss), a link over UC finds the gap by its
-- frame sequence numbers, RC stays lossless on this wire (a reliable
-- transport would retransmit), drop_every and partition work on messages
-- too, and faults that need packets are refused by name on this wire. The
-- faults are read when a device opens and changed by dev:faults{}.
local ffi = require("ffi")
local verbs = require("tbrt.verbs")
local V = require("verbs_helpers")
local L = require("links")

pcall(ffi.cdef, [[ int setenv(const char *, const char *, int); int unsetenv(const char *); ]])
local C = ffi.C

local function with_faults(spec, fn)
  return function(...)
    C.setenv("TBRT_FAULTS", spec, 1)
    local ok, err = pcall(fn, ...)
    C.unsetenv("TBRT_FAULTS")
    assert(ok, err)
  end
end

describe("soft wire faults", function()
  it("lose a UC message: the send completes, no receive does", with_faults("drop=100%", function()
    local p = V.pair{ personality = "linux-rc", type = "UC", wire = "shm" }
    assert(p.b:post_recv{ mr = p.bmr, len = 64, wr_id = 7 })
    assert(p.a:post_send{ mr = p.amr, len = 64, wr_id = 8 })
    local s = assert(p.cq_a:wait(1))
    assert.same({ 8, "IBV_WC_SUCCESS" }, { s[1].wr_id, s[1].status })
    assert.equal(0, #assert(p.cq_b:wait(1, 0.05)), "the dropped message never arrives")
    V.close(p)
  end))

  it("drop every Nth UC message, and all of them while partitioned, set at run time", function()
    local p = V.pair{ personality = "linux-rc", type = "UC", wire = "shm" }
    assert(p.dev:faults{ drop_every = 3 })
    for i = 1, 6 do assert(p.b:post_recv{ mr = p.bmr, len = 64, wr_id = i }) end
    for i = 1, 6 do assert(p.a:post_send{ mr = p.amr, len = 64, wr_id = 10 + i }) end
    assert.equal(6, #assert(p.cq_a:wait(6)))
    assert.equal(4, #assert(p.cq_b:wait(6, 0.1)), "messages 3 and 6 of 6 are lost")
    assert.equal(2, p.dev:stats().drops_injected)
    assert(p.dev:faults{ partition = "tx" })
    assert(p.a:post_send{ mr = p.amr, len = 64, wr_id = 20 })
    assert.equal(1, #assert(p.cq_a:wait(1)))
    assert.equal(0, #assert(p.cq_b:wait(1, 0.05)), "a partition loses everything")
    assert(p.dev:faults{})
    assert(p.a:post_send{ mr = p.amr, len = 64, wr_id = 21 })
    assert.equal(1, #assert(p.cq_b:wait(1)), "healed")
    local ok, err = p.dev:faults{ jitter = "1ms" }
    assert.is_nil(ok)
    assert.matches("jitter is a packet fault", err, 1, true)
    V.close(p)
  end)

  it("leave RC alone on shared memory (it would be retransmitted)", with_faults("drop=100%", function()
    local p = V.pair{ personality = "linux-rc", type = "RC", wire = "shm" }
    assert(p.b:post_recv{ mr = p.bmr, len = 64, wr_id = 7 })
    assert(p.a:post_send{ mr = p.amr, len = 64, wr_id = 8 })
    assert.equal("IBV_WC_SUCCESS", assert(p.cq_a:wait(1))[1].status)
    assert.equal("IBV_WC_SUCCESS", assert(p.cq_b:wait(1))[1].status)
    V.close(p)
  end))

  it("break a UC link with the engine's dropped-frame message", with_faults("drop=50%,seed=3",
    L.async(function()
      local a, b = L.pair({ device = "soft", personality = "apple-uc", wire = "shm" })
      assert(a and b, "links")
      -- ten frames (fewer than the receives posted: credit flow never waits),
      -- then read them: the first that arrives after a lost one says so
      for _ = 1, 10 do
        assert(a:send(string.rep("x", 100)))
        assert(a:flush(5))
      end
      local got, err
      for _ = 1, 10 do
        got, err = b:recv(100, 2)
        if not got then break end
      end
      assert.is_nil(got, "10 frames crossed a 50% drop unharmed")
      assert.matches("^EPROTO: .*recv: frame seq %d+ != expected %d+ %(a frame was dropped on the wire%)", err)
      a:close() ; b:close()
    end)))

  it("refuse what this wire cannot do, by name", function()
    for spec, pattern in pairs {
      ["delay=200us"] = "^EOPNOTSUPP: .*faults: delay is a packet fault, for the UDP wire",
      ["drop=abc"] = '^EINVAL: .*TBRT_FAULTS "drop=abc": drop=abc is not a percentage',
      ["drop=150%"] = "^EINVAL: .*TBRT_FAULTS .*: drop=150%% is not a percentage",
      ["loss=1%"] = '^EINVAL: .*TBRT_FAULTS .*: unknown fault "loss"',
      ["delay=200"] = "^EINVAL: .*delay=200 is not a time with its unit %(ns, us, ms, s",
      ["rate=10"] = "^EINVAL: .*rate=10 is not a rate with its unit",
      ["partition=up"] = "^EINVAL: .*partition=up: a direction is tx, rx or both",
    } do
      with_faults(spec, function()
        local dev, err = verbs.open("soft0", { personality = "linux-rc", wire = "shm" })
        if dev then dev:close() end
        assert.is_nil(dev, spec)
        assert.matches(pattern, err)
      end)()
    end
  end)
end)
