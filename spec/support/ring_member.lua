-- ring_member.lua - one process of a ring of soft links (fellow_yields_spec):
-- member I of N, pinned to CPU, passes a token ROUNDS times around.
--   tbrt spec/support/ring_member.lua I N ROUNDS CPU DIR [SPIN]
-- SPIN: the links' spin option (s): how long a waiter looks before it sleeps.
-- It listens on a port it writes to DIR/port.I, links to the next member
-- (port read from DIR/port.<I+1 mod N>) and takes the link from the one
-- before. Member 0 starts the token (8 bytes: a counter), every member adds
-- one before passing it on, and each checks it got what the one before sent
-- (rounds * N + I). Last line: {"cpu": C, "fellow_yields": Y, "rounds": R}.
local ffi = require("ffi")
local cjson = require("cjson")
local tbrt = require("tbrt")
local task = tbrt.task
package.path = package.path .. ";" .. arg[0]:gsub("ring_member%.lua$", "?.lua")
local E = require("share_ends")

local me, n, rounds, cpu, dir =
  tonumber(arg[1]), tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4]), arg[5]
assert(me and n and rounds and cpu and dir, "usage: ring_member.lua I N ROUNDS CPU DIR")
E.pin(E.only(cpu))

local function read_port(i, timeout)
  local until_t = os.time() + timeout
  while os.time() <= until_t do
    local f = io.open(dir .. "/port." .. i)
    if f then
      local p = tonumber(f:read("*a"))
      f:close()
      if p then return p end
    end
    task.sleep(0.01)
  end
  error("member " .. i .. " wrote no port within " .. timeout .. " s")
end

local opts = { device = "soft", personality = "linux-rc", timeout = 20, fallback = false,
  spin = tonumber(arg[6]) }
local out
tbrt.run(function()
  local srv = assert(tbrt.listen("127.0.0.1", 0, opts))
  -- written whole, then renamed: a reader never sees half a number
  local tmp = dir .. "/port." .. me .. ".tmp"
  local f = assert(io.open(tmp, "w"))
  f:write(tostring(srv.port))
  f:close()
  assert(os.rename(tmp, dir .. "/port." .. me))
  local next_port = read_port((me + 1) % n, 20)
  local links = assert(task.all({
    function() return assert(srv:accept(20)) end,
    function() return assert(tbrt.connect("127.0.0.1", next_port, opts)) end,
  }, 30))
  srv:close()
  local from, to = links[1], links[2]
  local tok = ffi.new("uint64_t[1]")
  local function pass()
    assert(to:send(tok, 8))
    assert(to:flush())
  end
  for r = 0, rounds - 1 do
    if me == 0 then
      tok[0] = r * n
      pass()
    end
    assert(from:recv_into(tok, 8, 20))
    local want = me == 0 and r * n + n - 1 or r * n + me - 1
    assert(tok[0] == want, string.format("member %d, round %d: token %d, want %d", me, r,
      tonumber(tok[0]), want))
    if me ~= 0 then
      tok[0] = tok[0] + 1
      pass()
    end
  end
  out = { cpu = E.cpu(), rounds = rounds,
          fellow_yields = from:stats().fellow_yields + to:stats().fellow_yields }
  from:close()
  to:close()
end)
print(cjson.encode(out))
