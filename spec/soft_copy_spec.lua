-- soft_copy_spec.lua - the shm wire shares a large send's copy with the
-- receiving process (core/soft/wire/shm/shm_copy.c). Every byte still
-- arrives; the receiver copies pieces while it waits; a job in its block
-- that names memory it may not copy (a peer's words) is never copied (a
-- READ's job is checked the other way round: the helper's memory that a
-- peer may read, into the reader's own); and a target that takes a piece
-- and stalls fails the send, after a bound, instead of hanging its sender. Each end is a process of its own
-- (spec/support/soft_end.lua).
local cjson = require("cjson")
local task = require("tbrt.task")
local E = require("soft_ends")
local H = require("helpers")
local L = require("links")

local MIB = 1048576

-- Ask x for req without waiting; returns a function that waits (bounded)
-- for the reply and fails the spec on an error reply.
local function start(x, req)
  local n = #x.lines
  x.inp:write(cjson.encode(req) .. "\n")
  return function(timeout)
    assert(task.wait(function() return #x.lines > n or not x:alive() end, timeout or 60),
      req.op .. ": no reply in time")
    assert(#x.lines > n, x:why_dead())
    local r = cjson.decode(table.remove(x.lines, n + 1))
    assert(not r.err, req.op .. ": " .. tostring(r.err))
    return r
  end
end

local function stats(x, qpn) return x:must{ op = "stats", qpn = qpn }.stats end

-- claim word: generation << 32 | back << 16 | front (a fresh job: back is its piece count)
local function claim(gen, pieces) return string.format("0x%x", gen * 2 ^ 32 + pieces * 2 ^ 16) end

describe("soft device: a large send's copy shared with its target", function()
  it("streams 1 MiB sends with every byte right while the receiver copies pieces of them",
    L.async(function()
      local a, b = E.pair{ personality = "linux-rc", type = "RC", mr_len = MIB }
      -- the receiver helps only while it polls at the same time as the sender
      -- copies; on a loaded machine a run may find it asleep throughout: runs
      -- until it took a piece, for up to 30 s
      local helped, tries, t0 = 0, 0, H.now()
      while helped == 0 and (tries < 4 or H.now() - t0 < 30) do
        tries = tries + 1
        local recv = start(b, { op = "stream_recv", n = 300, len = MIB })
        a:must({ op = "stream_send", n = 300, len = MIB }, 60)
        recv()
        helped = stats(b).pieces_helped
      end
      local sa, sb = stats(a), stats(b)
      assert.is_true(helped > 0, "the receiver took no piece in " .. tries .. " runs of 300")
      assert.is_true(sa.copies_shared > 0, "the sender counted no shared copy")
      assert.equal(0, sa.pieces_helped)
      assert.is_true(sb.bytes_helped >= helped and sb.bytes_helped <= helped * 16384,
        "bytes_helped " .. sb.bytes_helped .. " for " .. helped .. " pieces")
      -- per QP: each end's one QP holds all of its device's count; another QPN none
      local qa, qb = stats(a, a.qpn), stats(b, b.qpn)
      assert.equal(sa.copies_shared, qa.copies_shared)
      assert.equal(sb.pieces_helped, qb.pieces_helped)
      assert.equal(sb.bytes_helped, qb.bytes_helped)
      assert.equal(0, stats(b, a.qpn).pieces_helped)
      E.close(a, b)
    end))

  it("copies a job that names the sender's and its own memory, and no job that names other memory",
    L.async(function()
      local a, b = E.pair{ personality = "linux-rc", type = "RC", mr_len = MIB }
      local LEN = 65536
      -- write a job into b's block as its peer's executor would, then let b take a turn
      local function job(src_key, src_addr, dst_key, dst_addr, len, pieces)
        b:must{ op = "fill", buf = "recv", len = MIB, byte = 0x11 }
        for _, f in ipairs {
          { "copy.src_key", src_key }, { "copy.src_addr", src_addr },
          { "copy.dst_key", dst_key }, { "copy.dst_addr", dst_addr }, { "copy.len", len },
          { "copy.done", 0 }, { "copy.claim", claim(7, pieces) }, { "qp.help_wanted", 1 } } do
          E.scribble(b, f[1], f[2])
        end
        b:call{ op = "poll", n = 1, timeout = 0.2 }      -- nothing arrives: a turn or more
        assert.is_true(b:alive(), b:why_dead())
      end
      local function recv_bytes(off)
        return b:must{ op = "peek", buf = "recv", off = off, len = 4 }.bytes
      end
      a:must{ op = "fill", buf = "send", len = MIB, byte = 0x5a }
      local send_addr = tonumber(a.send_addr)
      local recv_addr = tonumber(b.recv_addr)
      -- the control: a job inside both MRs is copied (so the ones below are looked at);
      -- 64 KiB is 7 pieces: 3 of 16 KiB, then the last 16 KiB in quarters
      job(a.send_key, a.send_addr, b.recv_key, b.recv_addr, LEN, 7)
      assert.same({ 0x5a, 0x5a, 0x5a, 0x5a }, recv_bytes(LEN - 4))
      assert.same({ 0x11, 0x11, 0x11, 0x11 }, recv_bytes(LEN))
      local bad = {
        { "the source past the sender's MR", a.send_key,
          string.format("%.0f", send_addr + MIB - 100),
          b.recv_key, b.recv_addr, LEN, 7, 0 },
        { "the destination past its own MR", a.send_key, a.send_addr, b.recv_key,
          string.format("%.0f", recv_addr + MIB - 100), LEN, 7, MIB - 100 },
        { "a source key that is no MR", 0x12345, a.send_addr, b.recv_key, b.recv_addr, LEN, 7, 0 },
        { "a destination key that is the peer's", a.send_key, a.send_addr, a.send_key, b.recv_addr,
          LEN, 7, 0 },
        { "pieces beyond its length", a.send_key, a.send_addr, b.recv_key, b.recv_addr,
          LEN, 8, 0 },
        { "a length of 2^40", a.send_key, a.send_addr, b.recv_key, b.recv_addr, "0x10000000000",
          0x7fff, 0 },
      }
      for _, c in ipairs(bad) do
        job(c[2], c[3], c[4], c[5], c[6], c[7])
        assert.same({ 0x11, 0x11, 0x11, 0x11 }, recv_bytes(c[8]), c[1] .. ": copied")
      end
      -- and the connection goes on: real shared copies land whole
      local recv = start(b, { op = "stream_recv", n = 8, len = MIB })
      a:must({ op = "stream_send", n = 8, len = MIB }, 30)
      recv()
      E.close(a, b)
    end))

  it("copies a READ job from its own readable memory into the reader's, and no other READ job",
    L.async(function()
      -- send MRs no peer may read: a READ job naming b's is refused by b
      local a, b = E.pair{ personality = "linux-rc", type = "RC", mr_len = MIB,
        send_access = "local" }
      local LEN = 65536
      -- a READ job of a's (the reader) in b's block: b's memory into a's
      local function job(src_key, src_addr, dst_key, dst_addr)
        a:must{ op = "fill", buf = "send", len = MIB, byte = 0x22 }
        for _, f in ipairs {
          { "copy.src_key", src_key }, { "copy.src_addr", src_addr },
          { "copy.dst_key", dst_key }, { "copy.dst_addr", dst_addr }, { "copy.len", LEN },
          { "copy.read", 1 }, { "copy.done", 0 }, { "copy.claim", claim(9, 7) },
          { "qp.help_wanted", 1 } } do
          E.scribble(b, f[1], f[2])
        end
        b:call{ op = "poll", n = 1, timeout = 0.2 }
        assert.is_true(b:alive(), b:why_dead())
        return a:must{ op = "peek", buf = "send", off = LEN - 4, len = 4 }.bytes
      end
      b:must{ op = "fill", buf = "recv", len = MIB, byte = 0x66 }
      b:must{ op = "fill", buf = "send", len = MIB, byte = 0x77 }
      -- the control: from b's recv MR (readable) into a's send MR (a's own, LOCAL_WRITE)
      assert.same({ 0x66, 0x66, 0x66, 0x66 }, job(b.recv_key, b.recv_addr, a.send_key, a.send_addr))
      local recv_addr = tonumber(b.recv_addr)
      for _, c in ipairs {
        { "a source in its MR that no peer may read", b.send_key, b.send_addr, a.send_key, a.send_addr },
        { "a source past its MR", b.recv_key, string.format("%.0f", recv_addr + MIB - 100),
          a.send_key, a.send_addr },
        { "a destination key that is its own, not the reader's", b.recv_key, b.recv_addr,
          b.recv_key, a.send_addr },
        { "a destination key that is no MR", b.recv_key, b.recv_addr, 0x12345, a.send_addr },
      } do
        assert.same({ 0x22, 0x22, 0x22, 0x22 }, job(c[2], c[3], c[4], c[5]), c[1] .. ": copied")
      end
      E.close(a, b)
    end))

  -- Two ends with 4 MiB MRs and a third process that plays b's process
  -- towards a's executor (soft-scribble `mode` for ms).
  local function hostile_target(mode, ms)
    local a, b = E.pair{ personality = "linux-rc", type = "RC", mr_len = 4 * MIB }
    local player = H.spawn(E.SCRIBBLE, { "--personality", "linux-rc", tostring(b.qpn), mode,
      tostring(ms) })
    task.sleep(0.3)
    return a, b, player
  end

  -- One 4 MiB send from a into a receive b posted: its completion, and how long it took.
  local function send_4m(a, b)
    b:must{ op = "post_recv", len = 4 * MIB }
    local t0 = H.now()
    a:must({ op = "post_send", len = 4 * MIB }, 30)
    local r = a:must({ op = "poll", n = 1, timeout = 10 }, 30)
    assert.equal(1, #r.wcs)
    return r, H.now() - t0
  end

  it("fails the send of a sender whose target took a piece and never finished it, after 1 s",
    L.async(function()
      local a, b, thief = hostile_target("take-piece", 20000)
      -- the thief may share a CPU with the sender and miss a job: send until it
      -- takes one (until it ends: it took one, or its window passed)
      local r, took
      for _ = 1, 3000 do
        r, took = send_4m(a, b)
        if r.wcs[1].status ~= "IBV_WC_SUCCESS" or thief.code ~= nil then break end
      end
      local t = thief:wait(5)
      assert.equal(0, t.code, H.describe(t))
      assert.truthy(t.stdout:find("took piece", 1, true), H.describe(t))
      assert.are_not.equal("IBV_WC_SUCCESS", r.wcs[1].status)
      assert.truthy(tostring(r.wcs[1].why):find("did not finish them", 1, true), cjson.encode(r))
      assert.is_true(took >= 0.9 and took < 10, "failed after " .. took .. " s")
      E.close(a, b)
    end))

  it("holds the send while its target is stopped holding pieces, and fails it once it runs",
    L.async(function()
      local a, b, thief = hostile_target("take-piece", 30000)
      -- the pieces are the thief's, but the target's process is the one looked
      -- at: stopped (SIGSTOP), it is alive and not progressing, and the send
      -- waits past the 1 s bound; running again, the bound applies
      local held
      -- (until the thief ends: it took a piece, or its window passed)
      for _ = 1, 3000 do
        if thief.code ~= nil then break end
        b:must{ op = "post_recv", len = 4 * MIB }
        b.proc:kill("sigstop")
        a:must({ op = "post_send", len = 4 * MIB }, 30)
        local r = a:must({ op = "poll", n = 1, timeout = 1.6 }, 30)
        if #r.wcs == 0 then held = true break end
        b.proc:kill("sigcont")      -- the thief missed this one: again
        assert.equal("IBV_WC_SUCCESS", r.wcs[1].status, cjson.encode(r))
      end
      assert.is_true(held, "the thief never took a piece")
      b.proc:kill("sigcont")
      local t0 = H.now()
      local r = a:must({ op = "poll", n = 1, timeout = 5 }, 30)
      assert.equal(1, #r.wcs, "the send did not end once its target ran again")
      assert.are_not.equal("IBV_WC_SUCCESS", r.wcs[1].status)
      assert.truthy(tostring(r.wcs[1].why):find("did not finish them", 1, true), cjson.encode(r))
      assert.is_true(H.now() - t0 < 4, "it took " .. (H.now() - t0) .. " s after the target ran")
      assert.equal(0, thief:wait(5).code)
      E.close(a, b)
    end))

  it("ends the send of a sender whose target winds its claim word back, after the copy's pieces",
    L.async(function()
      local a, b, winder = hostile_target("rewind-pieces", 8000)
      -- each send is bounded by its own pieces, whatever the word says meanwhile;
      -- sends go on until the winder ends (it wound enough, or its window
      -- passed): on a loaded machine it may get the CPU only now and then
      local worst, sends = 0, 0
      while (sends < 20 or winder.code == nil) and sends < 3000 do
        local _, took = send_4m(a, b)
        worst = math.max(worst, took)
        sends = sends + 1
        -- the target's own receive may hold anything: it wound the word; the send ends
        b:must{ op = "poll", n = 1, timeout = 10 }
      end
      local w = winder:wait(10)
      assert.equal(0, w.code, H.describe(w))
      local rewinds = tonumber(w.stdout:match("wound a shared copy back (%d+) times"))
      assert.is_true(rewinds and rewinds > 0,
        "it never wound one back in " .. sends .. " sends: " .. H.describe(w))
      -- (without the bound a send copies until the word is left alone, or fails after 1 s)
      assert.is_true(worst < 0.5, "a send took " .. worst .. " s; " .. w.stdout)
      E.close(a, b)
    end))
end)
