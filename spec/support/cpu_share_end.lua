-- cpu_share_end.lua - one end of cpu_share_spec: both ends start pinned to
-- one CPU (so the scheduler has them share it), make a soft link, then
-- (unless "pinned") get back the CPUs they had, and ping-pong 8 bytes.
--   tbrt spec/support/cpu_share_end.lua listen  ROUNDS pinned|free
--       prints "port N", then answers ROUNDS round trips
--   tbrt spec/support/cpu_share_end.lua connect ROUNDS pinned|free PORT
-- Both print a last line {"cpu": C, "moves": M, "cpus": K}: the CPU it ends
-- on, link:stats().cpu_moves, and how many CPUs its mask allowed at the start.
local cjson = require("cjson")
local tbrt = require("tbrt")
package.path = package.path .. ";" .. arg[0]:gsub("cpu_share_end%.lua$", "?.lua")
local E = require("share_ends")

local role, rounds, mode, port = arg[1], tonumber(arg[2]), arg[3], tonumber(arg[4])
local start, cpus, first = E.mask()
E.pin(E.only(first))            -- the first CPU of the mask only

local opts = { device = "soft", personality = "linux-rc", timeout = 20, fallback = false }
local out
tbrt.run(function()
  local l = E.link(role, port, opts)
  if mode == "free" then E.pin(start) end
  local msg = require("ffi").new("uint8_t[8]")
  for i = 1, rounds do
    if role == "connect" then
      assert(l:send(msg, 8))
      assert(l:flush())
      assert(l:recv_into(msg, 8, 20))
    else
      assert(l:recv_into(msg, 8, 20))
      assert(l:send(msg, 8))
      assert(l:flush())
    end
  end
  out = { cpu = E.cpu(), moves = l:stats().cpu_moves, cpus = cpus }
  l:close()
end)
print(cjson.encode(out))
