-- cost_lua.lua - the Lua twin of tbrt-cost's pingpong (scripts/bench/tbrt_cost.c),
-- for scripts/bench/cost.sh: both ends of a link in this process and this
-- task, ITERS round trips of SIZE bytes through the Lua API (send + flush on
-- one end, recv_into on the other, and back), every byte checked. The soft
-- device executes a send at its doorbell, so each recv finds its message at
-- the first look: no waiting, and the instruction count is the same from run
-- to run. callgrind cannot name a JIT trace, so cost.sh runs this twice (ITERS
-- and 2 x ITERS) and divides the difference: set-up, the JIT's compiling and
-- the exit cancel out.
--
--   tbrt scripts/bench/cost_lua.lua DEVICE PERSONALITY SIZE ITERS
--       -> "round_trips ITERS"
local ffi = require("ffi")
local tbrt = require("tbrt")

ffi.cdef [[ int memcmp(const void *a, const void *b, size_t n); ]]
local C = ffi.C

local dev, pers, size, iters = arg[1], arg[2], tonumber(arg[3]), tonumber(arg[4])
if not (dev and pers and size and size > 0 and iters and iters > 0) then
  io.stderr:write("usage: tbrt scripts/bench/cost_lua.lua DEVICE PERSONALITY SIZE ITERS\n")
  os.exit(2)
end
local opts = { device = dev, personality = pers ~= "-" and pers or nil, timeout = 30,
  fallback = false }

local function fail(msg)
  io.stderr:write("cost_lua.lua: ", tostring(msg), "\n")
  os.exit(1)
end

local msg = dofile(arg[0]:gsub("[^/]*$", "") .. "pattern.lua")(size)
local buf = ffi.new("uint8_t[?]", math.max(size, 8))
local index = ffi.cast("uint32_t *", msg)

-- one message, from -> to: sent, found at once, checked
local function pass(from, to, i)
  if size >= 8 then index[0] = i end
  local ok, err = from:send(msg, size)
  if ok then ok, err = from:flush() end
  if not ok then fail(err) end
  local got, rerr = to:recv_into(buf, size, 5)
  if got ~= size then fail(rerr or ("recv: " .. tostring(got) .. " bytes")) end
  if C.memcmp(buf, msg, size) ~= 0 then fail("message " .. i .. " differs") end
end

tbrt.run(function()
  local srv = assert(tbrt.listen("127.0.0.1", 0, opts))
  local t = tbrt.spawn(function() return srv:accept(10) end)
  local a, aerr = tbrt.connect("127.0.0.1", srv.port, opts)
  local b, berr = t:join(10)
  srv:close()
  if not a or not b then fail(aerr or berr) end
  for i = 0, iters - 1 do
    pass(a, b, i)
    pass(b, a, i)
  end
  print("round_trips " .. iters)
  a:close()
  b:close()
end)
