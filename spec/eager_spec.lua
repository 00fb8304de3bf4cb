-- eager_spec.lua - eager frames (core/engine/transport/eager.c): small
-- frames RDMA-written into the peer's slots, found by its reader in memory,
-- in one sequence with the SEND frames; credits; the wake-up of a reader
-- that sleeps; links that write none; a peer's lies.
local ffi = require("ffi")
local task = require("tbrt.task")
local L = require("links")

local RC = { device = "soft", personality = "linux-rc" }

-- n bytes of pattern seed sent and flushed; read back and checked.
local function send_msg(l, n, seed)
  assert.equal(n, l:send(L.pattern(n, seed), n, 5))
  assert(l:flush())
end

local function recv_msg(l, n, seed)
  local buf = ffi.new("uint8_t[?]", n)
  local got, err = l:recv_into(buf, n, 5)
  assert.equal(n, got, err)
  local bad = L.check(buf, n, seed)
  assert.is_nil(bad, ("message of %d bytes (seed %d): byte %s differs"):format(n, seed, bad))
end

-- Round trips, so that each end has polled and holds the other's offer (a
-- link learns it when it looks at its completions), and eager frames went
-- both ways (each telling the other end what it consumed).
local function warm(a, b)
  for i = 1, 3 do
    send_msg(a, 8, i) ; recv_msg(b, 8, i)
    send_msg(b, 8, i) ; recv_msg(a, 8, i)
  end
end

describe("eager frames", function()
  it("carry small frames both ways, in order with SEND frames, every byte checked",
    L.async(function()
    local a, b = L.pair(RC)
    warm(a, b)
    local a0, b0 = a:stats(), b:stats()
    -- sizes around the slot's limit (232 payload bytes), a stride and more
    local sizes = { 1, 8, 100, 232, 233, 1000, 70000, 5, 131056, 131057, 7 }
    -- eager: what a flush leaves of at most 232 bytes (a stride carries
    -- 131056; a full one goes at once)
    local eager_sizes = 0
    for _, n in ipairs(sizes) do
      local tail = n % 131056
      if tail >= 1 and tail <= 232 then eager_sizes = eager_sizes + 1 end
    end
    assert.equal(7, eager_sizes)
    for round = 1, 20 do
      -- a burst each way, then read: the reader merges the two kinds by seq
      for i, n in ipairs(sizes) do send_msg(a, n, round * 16 + i) end
      for i, n in ipairs(sizes) do recv_msg(b, n, round * 16 + i) end
      for i = #sizes, 1, -1 do send_msg(b, sizes[i], round * 16 + i) end
      for i = #sizes, 1, -1 do recv_msg(a, sizes[i], round * 16 + i) end
    end
    local a1, b1 = a:stats(), b:stats()
    assert.equal(20 * eager_sizes, a1.eager_sends - a0.eager_sends, "a's small frames went eager")
    assert.equal(20 * eager_sizes, b1.eager_sends - b0.eager_sends, "b's small frames went eager")
    assert.equal(a1.eager_sends, b1.eager_recvs)
    assert.equal(b1.eager_sends, a1.eager_recvs)
    a:close() ; b:close()
    -- the slots' region goes after the QP, with the rings
    assert.equal("qp,mr,mr,mr,buf,buf,buf,cq,pd,dev", a:teardown())
  end))

  it("go as SENDs once the reader holds every slot, and eager again once it read them",
    L.async(function()
    local a, b = L.pair(RC)
    warm(a, b)
    local s0 = a:stats().eager_sends
    -- b reads nothing: 64 slots, then the stride ring takes the rest
    for i = 1, 74 do send_msg(a, 8, i) end
    -- (the warm-up's frames may not have been credited back yet)
    local eager = a:stats().eager_sends - s0
    assert.is_true(eager <= 64 and eager >= 61, "one frame per free slot, no more: " .. eager)
    for i = 1, 74 do recv_msg(b, 8, i) end
    -- read: the reader told the writer (a control write every half ring)
    local s1 = a:stats().eager_sends
    for i = 1, 10 do send_msg(a, 8, 100 + i) ; recv_msg(b, 8, 100 + i) end
    assert.equal(10, a:stats().eager_sends - s1, "credits came back")
    a:close() ; b:close()
  end))

  it("wake a reader that went to sleep with an empty SEND", L.async(function()
    -- b sleeps at once (spin 0): its eager frames would raise no event
    local a, b = L.pair(RC, { device = "soft", personality = "linux-rc", spin = 0 })
    warm(a, b)
    local got, err
    local t = task.spawn(function()
      local buf = ffi.new("uint8_t[8]")
      got, err = b:recv_into(buf, 8, 5)
      return L.check(buf, 8, 9)
    end)
    task.sleep(0.05)            -- b is asleep by now
    local w0 = a:stats().eager_wakes
    local s0 = a:stats().eager_sends
    send_msg(a, 8, 9)
    assert.is_nil(t:join(5))
    assert.equal(8, got, err)
    assert.equal(1, a:stats().eager_sends - s0, "the frame itself went eager")
    assert.is_true(a:stats().eager_wakes > w0, "a woke b")
    assert.is_true(b:stats().sleeps > 0, "b slept")
    -- awake again, b cleared its flag: frames go without wake-ups
    local w1 = a:stats().eager_wakes
    for i = 1, 5 do
      send_msg(b, 8, 20 + i) ; recv_msg(a, 8, 20 + i)
      send_msg(a, 8, 30 + i) ; recv_msg(b, 8, 30 + i)
    end
    assert.is_true(a:stats().eager_wakes - w1 <= 1, "at most one wake-up after b woke")
    a:close() ; b:close()
  end))

  for _, c in ipairs({
    { "eager = false", { device = "soft", personality = "linux-rc", eager = false } },
    { "apple-uc (fixed framing, UC)", { device = "soft", personality = "apple-uc" } },
    { "llama-apple framing", { device = "soft", personality = "linux-rc", framing = "llama-apple" } },
  }) do
    it("are not written on " .. c[1], L.async(function()
      local a, b = L.pair(c[2])
      warm(a, b)
      for i = 1, 10 do send_msg(a, 8, i) ; recv_msg(b, 8, i) end
      assert.equal(0, a:stats().eager_sends)
      assert.equal(0, b:stats().eager_recvs)
      a:close() ; b:close()
    end))
  end

  it("are not written to a peer that wants none (one end eager = false)", L.async(function()
    local a, b = L.pair(RC, { device = "soft", personality = "linux-rc", eager = false })
    warm(a, b)
    for i = 1, 10 do
      send_msg(a, 8, i) ; recv_msg(b, 8, i)
      send_msg(b, 8, i) ; recv_msg(a, 8, i)
    end
    assert.equal(0, a:stats().eager_sends + b:stats().eager_sends)
    a:close() ; b:close()
  end))

  for _, h in ipairs({
    { "eager-length", "recv: eager frame %d+ in slot %d+ says 233 bytes; a slot holds 1 to 232" },
    { "eager-credit", "eager: the peer says %(eager frame%) it consumed %d+ of our eager " ..
      "frames; we wrote %d+" },
  }) do
    it("fail the reader, naming it, on a hostile frame: " .. h[1], L.async(function()
      local a, b = L.pair(RC)
      warm(a, b)
      assert.is_true(a:inject(h[1]))
      send_msg(a, 8, 5)
      local got, err = b:recv(8, 5)
      assert.is_nil(got)
      assert.matches("^EPROTO: link %d+: " .. h[2], err)
      a:close() ; b:close()
    end))
  end

  it("refuse a test hook on a link that writes none", L.async(function()
    local a, b = L.pair({ device = "soft", personality = "linux-rc", eager = false })
    assert.is_false(a:inject("eager-length"))
    a:close() ; b:close()
  end))
end)

describe("eager frames and a peer's goodbye", function()
  -- A look polls the CQ every 4th time while eager frames come, and the
  -- liveness check reads the bootstrap socket every 64th: a goodbye found
  -- in a look that skipped the CQ must not hide a SEND frame that came
  -- before it. The trials put the reader's counters at every place of 64.
  -- (Both count b's progress calls; b's sends count for the second only.)
  it("leave nothing unread before EOF, whichever look finds the goodbye", L.async(function()
    local C = require("tbrt.ffi").C
    for trial = 0, 255 do
      local sends, empty = trial % 4, math.floor(trial / 4)
      local a, b = L.pair(RC)
      warm(a, b)
      for i = 1, sends do send_msg(b, 8, i) ; recv_msg(a, 8, i) end
      for _ = 1, empty do C.tbrt_link_progress(b._l) end
      send_msg(a, 1000, 2)           -- a SEND frame
      assert(a:close())              -- waits for it, then says goodbye
      task.sleep(0.002)              -- b's next liveness tick reads the socket
      recv_msg(b, 1000, 2)
      local got, err = b:recv(1, 1)
      assert.is_nil(got)
      assert.matches("^EOF", err)
      b:close()
    end
  end))
end)
