-- netns.lua - network namespaces a spec makes for itself (root): hosts
-- joined by veth "cables", addresses from 198.18.0.0/15, names unique to the
-- run (they carry the pid), removed when the test ends, passed or failed,
-- and those of runs that died are swept before a new run makes its own.
--
--   local N = require("netns")
--   local why = N.skip()              -- nil, or why namespaces cannot be made here
--   local net = N.make{ hosts = 2, cables = { { 1, 2 } } }
--   finally(net.close)                -- (busted's finally is the spec's, not a module's)
--   net.hosts[1].name, net.cables[1].addr[1], net.cables[1].dev[2]
--   N.run_in(net.hosts[1], { H.tbrt, "script.lua" }, opts)   -- H.run inside it
--   N.sh("ip -n " .. host.name .. " link set " .. dev .. " down")
local H = require("helpers")
local uv = require("luv")

local N = {}
local PREFIX = "tbrtu"          -- namespaces tbrtu<pid>h<i>, veths tbu<pid><c><a|b>

local function sh(cmd)
  local r = H.run("/bin/sh", { "-c", cmd .. " 2>&1" }, { timeout = 20 })
  return r.code == 0, r.stdout
end
N.sh = sh

-- Namespaces and veths of runs whose process is gone.
local function sweep()
  local _, out = sh("ip netns list")
  for name, pid in (out or ""):gmatch("(" .. PREFIX .. "(%d+)h%d+)") do
    if uv.kill(tonumber(pid), 0) ~= 0 then sh("ip netns del " .. name) end
  end
end

local probed
function N.skip()
  if probed ~= nil then return probed or nil end
  if not sh("command -v ip") then probed = "no ip command (iproute2)" return probed end
  local name = PREFIX .. uv.os_getpid() .. "probe"
  local ok, out = sh("ip netns add " .. name)
  if not ok then
    probed = "cannot make network namespaces here (needs root): " .. (out or ""):gsub("%s+$", "")
    return probed
  end
  sh("ip netns del " .. name)
  probed = false
  return nil
end

-- hosts: how many; cables: { {i, j}, ... } pairs of host numbers, each a
-- veth with a /24 of its own: 198.19.<pid % 200 + c>.i / .j
function N.make(o)
  sweep()
  local pid = uv.os_getpid()
  local net = { hosts = {}, cables = {} }
  local function cleanup()
    for _, h in ipairs(net.hosts) do sh("ip netns del " .. h.name) end
    net.hosts = {}
  end
  net.close = cleanup
  for i = 1, o.hosts or 2 do
    local name = string.format("%s%dh%d", PREFIX, pid, i)
    assert(sh("ip netns add " .. name), "ip netns add " .. name)
    sh("ip -n " .. name .. " link set lo up")
    net.hosts[i] = { name = name, index = i }
  end
  for c, ends in ipairs(o.cables or { { 1, 2 } }) do
    local a, b = net.hosts[ends[1]], net.hosts[ends[2]]
    local da, db = string.format("tbu%d%da", pid % 100000, c), string.format("tbu%d%db", pid % 100000, c)
    local subnet = string.format("198.19.%d", (pid + c) % 250)
    local aa, ab = subnet .. ".1", subnet .. ".2"
    assert(sh(string.format("ip link add %s netns %s type veth peer name %s netns %s", da, a.name,
      db, b.name)), "veth " .. da)
    for _, x in ipairs { { a, da, aa }, { b, db, ab } } do
      assert(sh(string.format("ip -n %s addr add %s/24 dev %s", x[1].name, x[3], x[2])))
      assert(sh(string.format("ip -n %s link set %s up", x[1].name, x[2])))
    end
    net.cables[c] = { hosts = { a, b }, dev = { da, db }, addr = { aa, ab } }
  end
  return net
end

-- Run argv (H.run) inside a host's namespace.
function N.run_in(host, argv, opts)
  local args = { "netns", "exec", host.name }
  for _, a in ipairs(argv) do args[#args + 1] = a end
  return H.run("/usr/sbin/ip", args, opts)
end

-- Start argv inside a namespace and let it run (H.spawn's handle).
function N.start_in(host, argv, opts)
  local args = { "netns", "exec", host.name }
  for _, a in ipairs(argv) do args[#args + 1] = a end
  return H.spawn("/usr/sbin/ip", args, opts)
end

-- The names left behind by this run (for a check that nothing was).
function N.leftovers()
  local out = {}
  local _, ns = sh("ip netns list")
  for name in (ns or ""):gmatch("(" .. PREFIX .. uv.os_getpid() .. "h%d+)") do out[#out + 1] = name end
  return out
end

return N
