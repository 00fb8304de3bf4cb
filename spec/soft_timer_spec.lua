-- soft_timer_spec.lua - the soft device's timers run without the owner
-- calling in: a program that only sleeps on its completion fd (as UCX does
-- in its own epoll) still sees an RNR retry succeed, RNR retries run out,
-- and an ACK timeout for a peer that is gone. Each wait below is the
-- program's: arm, sleep on the fd (bounded), and only when it wakes, ack
-- and poll. Without timers of its own the device would never wake it.
--
-- And the completion timestamps: the time the work finished, not the time
-- the program polled. And the alarm thread: it ends once no device needs it.
local ffi = require("ffi")
local core = require("tbrt.ffi")
local link = require("tbrt.link")
local V = require("verbs_helpers")

pcall(ffi.cdef, [[ struct pollfd { int fd; short events; short revents; }; ]])
pcall(ffi.cdef, [[ int poll(struct pollfd *fds, unsigned long nfds, int timeout); ]])

-- Sleep on cq's fd until a completion comes or `seconds` pass, polling only
-- when woken. Returns the completions and how many wake-ups it took.
local function sleep_for_completion(cq, seconds)
  local p = ffi.new("struct pollfd[1]")
  p[0].fd, p[0].events = cq.c.fd, 1
  local deadline, wakes = link.now() + seconds, 0
  while link.now() < deadline do
    assert.equal(0, core.C.tbrt_cq_arm(cq.c))
    local got = assert(cq:poll(4))          -- what came before the arm
    if #got > 0 then return got, wakes end
    local left = math.max(1, math.floor((deadline - link.now()) * 1000))
    if ffi.C.poll(p, 1, left) == 1 then
      wakes = wakes + 1
      core.C.tbrt_cq_ack(cq.c)
    end
  end
  return {}, wakes
end

describe("soft timers", function()
  local p
  after_each(function() if p then V.close(p) p = nil end end)

  it("an RNR retry goes through while the sender sleeps on its CQ fd", function()
    -- timer code 18 = 5.12 ms: the receive comes while the timer runs
    p = V.pair{ personality = "linux-rc", type = "RC", min_rnr_timer = 18, rnr_retry = 7 }
    assert(p.a:post_send{ mr = p.amr, len = 64, wr_id = 3 })
    assert(p.b:post_recv{ mr = p.bmr, len = 64, wr_id = 4 })
    local t0 = link.now()
    local wcs, wakes = sleep_for_completion(p.cq_a, 2)
    assert.equal(1, #wcs, "the retry never ran (no wake-up from the device)")
    assert.is_true(wakes <= 8, wakes .. " wake-ups for one retry: the device keeps ringing")
    assert.equal("IBV_WC_SUCCESS", wcs[1].status)
    assert.equal(3, wcs[1].wr_id)
    assert.is_true(link.now() - t0 < 1, "took " .. (link.now() - t0) .. " s")
    assert.equal(1, #assert(p.cq_b:wait(1, 1)))
  end)

  it("RNR retries run out while the sender sleeps: IBV_WC_RNR_RETRY_EXC_ERR", function()
    p = V.pair{ personality = "linux-rc", type = "RC", min_rnr_timer = 14, rnr_retry = 3 }
    local t0 = link.now()
    assert(p.a:post_send{ mr = p.amr, len = 64, wr_id = 5 })
    local wcs = sleep_for_completion(p.cq_a, 2)
    assert.equal(1, #wcs, "the retries never ran")
    assert.equal("IBV_WC_RNR_RETRY_EXC_ERR", wcs[1].status)
    assert.is_true(link.now() - t0 >= 3 * 1.28e-3)
  end)

  it("an ACK timeout for a peer that is gone while the sender sleeps: IBV_WC_RETRY_EXC_ERR", function()
    -- timeout 10 = 4.2 ms a try, retry_cnt 1: two tries
    p = V.pair{ personality = "linux-rc", type = "RC", timeout = 10, retry_cnt = 1 }
    assert(p.b:destroy())
    local t0 = link.now()             -- before the post: its first try starts the clock
    assert(p.a:post_send{ mr = p.amr, len = 64, wr_id = 6 })
    local wcs = sleep_for_completion(p.cq_a, 2)
    assert.equal(1, #wcs, "the ACK timeout never fired")
    assert.equal("IBV_WC_RETRY_EXC_ERR", wcs[1].status)
    assert.is_true(link.now() - t0 >= 8e-3, "gave up after " .. (link.now() - t0) .. " s")
  end)

  it("completion timestamps are when the work finished, not when it was polled", function()
    p = V.pair{ personality = "linux-rc", type = "RC" }
    assert(p.b:post_recv{ mr = p.bmr, len = 64, wr_id = 1 })
    local before = link.now()
    assert(p.a:post_send{ mr = p.amr, len = 64, wr_id = 2 })
    local after = link.now()
    -- sleep, then poll: the stamps must still say "then"
    ffi.C.poll(nil, 0, 60)
    local polled = link.now()
    local a = assert(p.cq_a:poll(4, true))
    local b = assert(p.cq_b:poll(4, true))
    assert.equal(1, #a)
    assert.equal(1, #b)
    for _, w in ipairs { a[1], b[1] } do
      local t = w.ts_ns / 1e9
      assert.is_true(t >= before - 1e-3, "stamp " .. t .. " before the post at " .. before)
      assert.is_true(t <= after + 1e-3, "stamp " .. t .. " is the poll's (" .. polled ..
        "), not the send's (" .. after .. ")")
    end
  end)
end)

describe("the soft device's alarm thread", function()
  -- a process of its own: other specs' devices live on in this one
  it("starts when a CQ with a timer pending is armed, not while its owner polls, and is gone " ..
    "when the last of the process's devices is closed", function()
    local H = require("helpers")
    local dir = H.tmpdir()
    local script = dir .. "/alarm_thread.lua"
    H.write_file(script, [[
      package.path = ]] .. string.format("%q", H.root .. "/spec/support/?.lua;") .. [[ .. package.path
      local uv = require("luv")
      local core = require("tbrt.ffi")
      local V = require("verbs_helpers")
      local function threads()
        local n, it = 0, uv.fs_scandir("/proc/self/task")
        while uv.fs_scandir_next(it) do n = n + 1 end
        return n
      end
      local before = threads()
      -- an RNR NAK: while the sender polls, its polls run the retries
      local p = V.pair{ personality = "linux-rc", type = "RC", min_rnr_timer = 14, rnr_retry = 7 }
      assert(p.a:post_send{ mr = p.amr, len = 64, wr_id = 1 })
      assert(#assert(p.cq_a:wait(1, 0.05)) == 0)
      local polling = threads()
      -- armed to sleep on its fd: now the retry is the alarm thread's to time
      assert(core.C.tbrt_cq_arm(p.cq_a.c) == 0)
      local armed = threads()
      assert(p.b:post_recv{ mr = p.bmr, len = 64, wr_id = 2 })
      assert(#assert(p.cq_a:wait(1, 2)) == 1)
      V.close(p)
      -- gone when the last close returns (it waited for the thread), not later
      print(string.format("threads %d %d %d %d", before, polling, armed, threads()))
    ]])
    local r = H.run_tbrt({ script }, { timeout = 20 })
    H.rmtree(dir)
    assert.equal(0, r.code, H.describe(r))
    local before, polling, armed, after = r.stdout:match("threads (%d+) (%d+) (%d+) (%d+)")
    assert.is_not_nil(before, H.describe(r))
    assert.equal(tonumber(before), tonumber(polling), "a thread started for a CQ that was " ..
      "polled, not armed: " .. r.stdout)
    assert.is_true(tonumber(armed) > tonumber(before), "no thread started: " .. r.stdout)
    assert.equal(tonumber(before), tonumber(after), "a thread of ours outlived the last close")
  end)

  -- LuaJIT unloads the library at exit: a thread still inside it then runs
  -- unmapped code (this crashed about 1 exit in 10 with SIGSEGV)
  it("is gone before the library is unloaded at exit, devices closed or not", function()
    local H = require("helpers")
    local dir = H.tmpdir()
    local script = dir .. "/alarm_exit.lua"
    H.write_file(script, [[
      package.path = ]] .. string.format("%q", H.root .. "/spec/support/?.lua;") .. [[ .. package.path
      local V = require("verbs_helpers")
      local p = V.pair{ personality = "linux-rc", type = "RC", min_rnr_timer = 1, rnr_retry = 7 }
      assert(p.a:post_send{ mr = p.amr, len = 64, wr_id = 1 })   -- an RNR NAK: the thread starts
      assert(#assert(p.cq_a:wait(1, 0.002)) == 0)
      assert(p.b:post_recv{ mr = p.bmr, len = 64, wr_id = 2 })
      assert(#assert(p.cq_a:wait(1, 2)) == 1)
      if arg[1] == "close" then V.close(p) end
      print("exiting")
    ]])
    local bad = {}
    for i = 1, 8 do
      local how = i % 2 == 0 and "close" or "leave"
      local r = H.run_tbrt({ script, how }, { timeout = 20 })
      if r.code ~= 0 or not r.stdout:find("exiting", 1, true) then
        bad[#bad + 1] = how .. ": " .. H.describe(r)
      end
    end
    H.rmtree(dir)
    assert.equal(0, #bad, table.concat(bad, "\n"))
  end)
end)
