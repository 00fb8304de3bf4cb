-- wait_mark_end.lua - one end of cpu_share_spec's wait-mark cases: does a
-- waiter take its peer for one sharing its CPU only while the peer waits on
-- the link, not after it went on to other things?
--   tbrt spec/support/wait_mark_end.lua listen fresh|stale     prints "port N"
--   tbrt spec/support/wait_mark_end.lua connect fresh|stale PORT
-- Both ends start pinned to the first CPU of their mask and make a soft
-- link. The end with the higher QPN ("marker") then looks at the link as a
-- waiter does (tbrt_link_idle, which marks where it waits) for 5 ms, says
-- so, and then (fresh) goes on looking, or (stale) leaves the link alone.
-- The end with the lower QPN ("looker") gets its whole mask back 50 ms
-- after the word and looks at the link while still on the first CPU: a
-- peer it takes for one waiting on its CPU makes it move to another CPU
-- (stats().cpu_moves; the lower QPN moves first). Each prints a last line
-- {"role": R, "moves": M, "cpus": K, "bursts": B}: B, the looker's bursts
-- of looks made on the first CPU.
local cjson = require("cjson")
local tbrt = require("tbrt")
local C = require("tbrt.ffi").C
local task = tbrt.task
package.path = package.path .. ";" .. arg[0]:gsub("wait_mark_end%.lua$", "?.lua")
local E = require("share_ends")

local role, mode, port = arg[1], arg[2], tonumber(arg[3])
assert((role == "listen" or role == "connect") and (mode == "fresh" or mode == "stale"),
  "usage: wait_mark_end.lua listen|connect fresh|stale [PORT]")
local start, cpus, first = E.mask()
E.pin(E.only(first))

local opts = { device = "soft", personality = "linux-rc", timeout = 20, fallback = false }
local out
tbrt.run(function()
  local l = E.link(role, port, opts)
  local info = l:info()
  local marker = info.qpn > info.peer_qpn
  -- the marker marks for 5 ms, then says so ("m") and (fresh) goes on
  -- marking until the looker is done ("e"), or (stale) leaves the link
  -- alone meanwhile (sending one byte never waits, so never marks). The
  -- looker waits 50 ms after the word, then looks in bursts of 20 while on
  -- the first CPU, a ms apart (for the marker to run), until it moved or
  -- for 100 bursts.
  local bursts, moves = 0, 0
  if marker then
    local t0 = tbrt.now()
    while tbrt.now() - t0 < 0.005 do C.tbrt_link_idle(l._l) end
    assert(l:send("m"))
    assert(l:flush())
    if mode == "fresh" then
      t0 = tbrt.now()
      while C.tbrt_link_ready_for(l._l, C.TBRT_WAIT_RECV) == 0 do
        C.tbrt_link_idle(l._l)
        assert(C.tbrt_link_progress(l._l) >= 0, "progress")
        assert(tbrt.now() - t0 < 20, "no word from the looker in 20 s")
      end
    else
      E.await(l, 20)
    end
    assert(l:recv(1, 20) == "e")
  else
    E.await(l, 20)
    assert(l:recv(1, 20) == "m")
    task.sleep(0.05)
    E.pin(start)
    for _ = 1, 100 do
      if E.cpu() == first then
        bursts = bursts + 1
        for _ = 1, 20 do C.tbrt_link_idle(l._l) end
      end
      moves = l:stats().cpu_moves
      if moves > 0 then break end
      task.sleep(0.001)
    end
    assert(l:send("e"))
    assert(l:flush())
  end
  out = { role = marker and "marker" or "looker", moves = marker and l:stats().cpu_moves or moves,
          cpus = cpus, bursts = bursts }
  l:close()
end)
print(cjson.encode(out))
