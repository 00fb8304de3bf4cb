-- port_spec.lua - a port that goes down at run time (a pulled cable): the
-- device shows it, RC sends fail with IBV_WC_RETRY_EXC_ERR saying so, and a
-- link reports ENETDOWN within its liveness bound instead of hanging.
local verbs = require("tbrt.verbs")
local tbrt = require("tbrt")
local task = require("tbrt.task")
local V = require("verbs_helpers")
local L = require("links")

describe("a port going down", function()
  local dev
  after_each(function()
    if dev then dev:set_port(1, nil) dev:set_port(2, nil) dev:close() dev = nil end
  end)

  it("shows in the port state and the GID table, and comes back", function()
    dev = assert(verbs.open("soft0", { personality = "linux-rc" }))
    local n = #dev:gids(1)
    assert(dev:set_port(1, "down"))
    assert.equal("DOWN", dev:port(1).state)
    assert.equal(2, #dev:gids(1), "only the link-local GIDs without a link")
    local other = assert(verbs.open("soft0", { personality = "linux-rc" }))
    assert.equal("DOWN", other:port(1).state, "every user of the device sees it")
    other:close()
    assert(dev:set_port(1, nil))
    assert.equal("ACTIVE", dev:port(1).state)
    assert.equal(n, #dev:gids(1))
    assert.has_error(function() dev:set_port(1, "unplugged") end)
    local ok, err = dev:set_port(3, "down")
    assert.is_nil(ok)
    assert.matches("^EINVAL: .*port 3 does not exist", err)
  end)

  it("fails RC sends with IBV_WC_RETRY_EXC_ERR naming the port", function()
    local p = V.pair{ personality = "linux-rc", type = "RC", timeout = 8, retry_cnt = 1 }
    dev = assert(verbs.open("soft0", { personality = "linux-rc" }))
    assert(p.b:post_recv{ mr = p.bmr, len = 64 })
    assert(dev:set_port(1, "down"))
    assert(p.a:post_send{ mr = p.amr, len = 64, wr_id = 4 })
    local wc = assert(p.cq_a:wait(1, 2))
    assert.equal("IBV_WC_RETRY_EXC_ERR", wc[1].status)
    assert.matches("port on the path is not ACTIVE", wc[1].why)
    assert.equal(0, #assert(p.cq_b:wait(1, 0.01)), "nothing arrived")
    V.close(p)
  end)

  it("fails the next RC send after a port goes down while sends flowed (a sender's kept answer is dropped)", function()
    local p = V.pair{ personality = "linux-rc", type = "RC", timeout = 8, retry_cnt = 1 }
    dev = assert(verbs.open("soft0", { personality = "linux-rc" }))
    for i = 1, 3 do
      assert(p.b:post_recv{ mr = p.bmr, len = 64 })
      assert(p.a:post_send{ mr = p.amr, len = 64, wr_id = i })
      local wc = assert(p.cq_a:wait(1, 2))
      assert.equal("IBV_WC_SUCCESS", wc[1].status)
      assert.equal(1, #assert(p.cq_b:wait(1, 2)))
    end
    assert(p.b:post_recv{ mr = p.bmr, len = 64 })
    assert(dev:set_port(1, "down"))
    assert(p.a:post_send{ mr = p.amr, len = 64, wr_id = 9 })
    local wc = assert(p.cq_a:wait(1, 2))
    assert.equal("IBV_WC_RETRY_EXC_ERR", wc[1].status)
    assert.matches("port on the path is not ACTIVE", wc[1].why)
    assert.equal(0, #assert(p.cq_b:wait(1, 0.01)), "nothing arrived")
    V.close(p)
  end)

  for _, pers in ipairs { "apple-uc", "linux-rc" } do
    it("breaks a waiting link with ENETDOWN within the bound (" .. pers .. ")", L.async(function()
      local a, b = L.pair({ device = "soft", personality = pers })
      local port = a:info().port
      dev = assert(verbs.open("soft0", { personality = pers }))
      local r = task.spawn(function() return b:recv(4, 10) end)
      task.sleep(0.05)
      local t0 = tbrt.now()
      assert(dev:set_port(port, "down"))
      local data, err = r:join(5)
      assert.is_nil(data)
      assert.matches("^ENETDOWN: link %d+: port " .. port .. " of soft0 went DOWN %(link lost", err)
      assert.is_true(tbrt.now() - t0 < 1, "noticed after " .. (tbrt.now() - t0) .. " s")
      a:close() ; b:close()
    end))
  end
end)
