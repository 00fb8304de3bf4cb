-- link_wait_spec.lua - how a Lua task waits on a link: while it busy-polls,
-- other ready tasks run (one thread serves every link; a spinning waiter
-- must not starve them), the spin window still ends in a park, and the
-- wait's timeout holds however long the spin is.
local task = require("tbrt.task")
local L = require("links")
local now = require("tbrt").now

describe("a task waiting on a link", function()
  it("lets other ready tasks run while it spins, and keeps its timeout", L.async(function()
    local a, b = L.pair({ device = "soft", personality = "linux-rc", spin = 5 })
    local turns, done = 0, false
    local other = task.spawn(function()
      while not done do turns = turns + 1 ; task.sleep(0) end
    end)
    local t0 = now()
    local data, err = b:recv(1, 0.3)          -- nothing comes: a 5 s spin, a 0.3 s bound
    local waited = now() - t0
    done = true
    other:join(1)
    assert.is_nil(data)
    assert.matches("^ETIMEDOUT", err)
    assert.is_true(waited < 1, "the timeout held: " .. waited)
    assert.is_true(turns > 100, "the other task ran " .. turns .. " times")
    a:close() ; b:close()
  end))

  it("parks once its spin is over, even while others keep yielding", L.async(function()
    local a, b = L.pair({ device = "soft", personality = "linux-rc", spin = 0.01 })
    local sleeps0 = b:stats().sleeps
    local done = false
    local other = task.spawn(function() while not done do task.sleep(0) end end)
    local data = b:recv(1, 0.2)
    done = true
    other:join(1)
    assert.is_nil(data)
    assert.is_true(b:stats().sleeps > sleeps0, "armed and slept")
    a:close() ; b:close()
  end))
end)
