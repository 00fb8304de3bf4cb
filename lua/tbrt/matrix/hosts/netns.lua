-- tbrt/matrix/hosts/netns.lua - the `netns` launcher: tbrt makes N network
-- namespaces on this machine, joined by veth pairs to a bridge, and runs one
-- agent in each (`ip netns exec`). Needs root. Everything it makes is named
-- after the driver's pid and removed at the end, also after an error or a
-- Ctrl-C; left-overs of a driver that was killed (its pid gone) are removed
-- by the next run.
--
--   namespace  tbrtm<pid>h<i>     veth  tbm<pid>v<i> (bridge side)
--   bridge     tbm<pid>                 tbm<pid>p<i> (namespace side)
--   addresses  198.18.0.0/15: one free /24 per run, hosts .1 .. .N,
--              the bridge (where the coordinator listens) .254
--
-- The /24 is picked from the pid and checked against every IPv4 address
-- and route on this host, so runs side by side do not collide.
--
-- M.network(count, opts) makes the same network without agents (the ssh
-- spec puts an sshd in each namespace).
local uv = require("luv")
local proc = require("tbrt.matrix.proc")
local hosts = require("tbrt.matrix.hosts")

local M = {}

local SUBNETS = 512               -- /24s in 198.18.0.0/15

local function subnet_text(k) return string.format("198.%d.%d", 18 + math.floor(k / 256), k % 256) end

-- /24s already in use on this host (addresses or routes in 198.18/15).
local function used_subnets()
  local used = {}
  for _, argv in ipairs { { "ip", "-4", "-o", "addr", "show" }, { "ip", "-4", "route", "show", "table", "all" } } do
    local r = proc.run(argv, { timeout = 10 })
    for a, b in ((r and r.stdout) or ""):gmatch("198%.(1[89])%.(%d+)%.") do
      used[(tonumber(a) - 18) * 256 + tonumber(b)] = true
    end
  end
  return used
end

local function names(pid, count)
  local n = { bridge = "tbm" .. pid, ns = {}, veth = {}, inner = {}, prefix = "tbrtm" .. pid .. "h" }
  for i = 1, count do
    n.ns[i] = n.prefix .. (i - 1)
    n.veth[i] = "tbm" .. pid .. "v" .. (i - 1)
    n.inner[i] = "tbm" .. pid .. "p" .. (i - 1)
  end
  return n
end

local function ip_batch(lines, ns, what)
  local argv = { "ip" }
  if ns then argv[#argv + 1] = "-n"; argv[#argv + 1] = ns end
  argv[#argv + 1] = "-batch"
  argv[#argv + 1] = "-"
  return proc.check(argv, what, { stdin = table.concat(lines, "\n") .. "\n", timeout = 20 })
end

-- Remove namespaces, veths and bridges of drivers that no longer run
-- (names tbrtm<pid><tag>h<i>, tbm<pid><tag>[v<i>]; the tag is letters).
local function gone(pid)
  if pid == uv.os_getpid() then return false end
  local ok, err = uv.kill(pid, 0)
  return not ok and tostring(err):match("ESRCH") ~= nil
end

function M.reap_stale()
  local ns = proc.run({ "ip", "netns", "list" }, { timeout = 10 })
  local links = proc.run({ "ip", "-o", "link", "show" }, { timeout = 10 })
  local veths, rest = {}, {}
  for name, pid in ((links and links.stdout) or ""):gmatch("%d+: (tbm(%d+)%a*v%d+)[@:]") do
    if gone(tonumber(pid)) then veths[#veths + 1] = name end
  end
  for name, pid in ((links and links.stdout) or ""):gmatch("%d+: (tbm(%d+)%a*)[@:]") do
    if gone(tonumber(pid)) then rest[#rest + 1] = name end
  end
  for _, name in ipairs(veths) do proc.run({ "ip", "link", "del", name }, { timeout = 10 }) end
  for name, pid in ((ns and ns.stdout) or ""):gmatch("(tbrtm(%d+)%a*h%d+)") do
    if gone(tonumber(pid)) then proc.run({ "ip", "netns", "del", name }, { timeout = 10 }) end
  end
  for _, name in ipairs(rest) do proc.run({ "ip", "link", "del", name }, { timeout = 10 }) end
end

local Net = {}
Net.__index = Net

-- Make count namespaces on a bridge. opts: pid (names), tag (a word in
-- the names after the pid, for two networks in one process).
function M.network(count, opts)
  opts = opts or {}
  local pid = tostring(opts.pid or uv.os_getpid()) .. (opts.tag or "")
  if not proc.which("ip") then return nil, "netns hosts: the ip command (iproute2) is missing" end
  local self = setmetatable({ count = count, n = names(pid, count), made = {} }, Net)
  if #self.n.bridge > 15 or #self.n.veth[count] > 15 then
    return nil, "netns hosts: interface names too long for pid " .. pid
  end
  M.reap_stale()
  local used = used_subnets()
  local start = tonumber(opts.pid or uv.os_getpid()) % SUBNETS
  for j = 0, SUBNETS - 1 do
    local k = (start + j * 37) % SUBNETS             -- 37: spread, co-prime to 512
    if not used[k] then self.subnet = subnet_text(k) break end
  end
  if not self.subnet then return nil, "netns hosts: no free /24 left in 198.18.0.0/15" end
  self.gateway = self.subnet .. ".254"
  self.addrs = {}
  for i = 1, count do self.addrs[i] = self.subnet .. "." .. i end
  local n = self.n
  local ok, err = proc.check({ "ip", "link", "add", n.bridge, "type", "bridge" }, "netns hosts: make the bridge",
    { timeout = 10 })
  if not ok then
    if err:find("Operation not permitted", 1, true) then
      err = "netns hosts need root (CAP_NET_ADMIN): " .. err
    end
    return nil, err
  end
  self.made.bridge = true
  local root_lines = { "addr add " .. self.gateway .. "/24 dev " .. n.bridge, "link set " .. n.bridge .. " up" }
  for i = 1, count do
    ok, err = proc.check({ "ip", "netns", "add", n.ns[i] }, "netns hosts: add namespace " .. n.ns[i], { timeout = 10 })
    if not ok then self:remove() return nil, err end
    self.made[#self.made + 1] = n.ns[i]
    root_lines[#root_lines + 1] = string.format("link add %s type veth peer name %s netns %s", n.veth[i], n.inner[i], n.ns[i])
    root_lines[#root_lines + 1] = string.format("link set %s master %s up", n.veth[i], n.bridge)
  end
  ok, err = ip_batch(root_lines, nil, "netns hosts: bridge and veths")
  if not ok then self:remove() return nil, err end
  for i = 1, count do
    ok, err = ip_batch({ "link set lo up", string.format("addr add %s/24 dev %s", self.addrs[i], n.inner[i]),
      string.format("link set %s up", n.inner[i]) }, n.ns[i], "netns hosts: addresses in " .. n.ns[i])
    if not ok then self:remove() return nil, err end
    -- a socket orphaned on a host whose cable was pulled retries its FIN
    -- for minutes and keeps the namespace alive that long; let it give up
    -- after one retry (per-namespace sysctl; best effort)
    proc.run({ "ip", "netns", "exec", n.ns[i], "sysctl", "-q", "-w", "net.ipv4.tcp_orphan_retries=1" },
      { timeout = 10 })
  end
  return self
end

-- Remove the veths, the namespaces and the bridge. The veths go first and
-- by name (a veth pair goes with either end): a namespace whose name is
-- gone may live on unseen while a socket in it lingers, and must not keep
-- an interface in ours.
function Net:remove()
  if #self.made > 0 then
    local lines = {}
    for i = 1, #self.made do lines[#lines + 1] = "link del " .. self.n.veth[i] end
    proc.run({ "ip", "-force", "-batch", "-" }, { stdin = table.concat(lines, "\n") .. "\n", timeout = 20 })
  end
  for i = #self.made, 1, -1 do
    proc.run({ "ip", "netns", "del", self.made[i] }, { timeout = 10 })
    self.made[i] = nil
  end
  if self.made.bridge then
    proc.run({ "ip", "link", "del", self.n.bridge }, { timeout = 10 })
    self.made.bridge = nil
  end
end

-- The same, from a path that cannot wait on the loop.
function Net:remove_now()
  for i = 1, #self.made do os.execute("ip link del " .. self.n.veth[i] .. " 2>/dev/null") end
  for i = #self.made, 1, -1 do
    os.execute("ip netns del " .. self.made[i] .. " 2>/dev/null")
    self.made[i] = nil
  end
  if self.made.bridge then
    os.execute("ip link del " .. self.n.bridge .. " 2>/dev/null")
    self.made.bridge = nil
  end
end

---------------------------------------------------------------------------
-- The launcher.

local Group = setmetatable({}, { __index = hosts.PerRank })
Group.__index = Group

function M.new(decl, env)
  local g = hosts.per_rank("netns", decl, env)
  return setmetatable(g, Group)
end

function Group:setup()
  local net, err = M.network(self.count, { pid = self.env.pid })
  if not net then return nil, err end
  self.net = net
  return true
end

function Group:coordinator() return self.net.gateway, self.net.gateway end

function Group:describe(rank)
  return string.format("namespace %s (%s)", self.net.n.ns[rank + 1], self.net.addrs[rank + 1])
end

function Group:relaunch(rank)
  if not self.net or not self.net.made[rank + 1] then return nil, "its namespace is gone" end
  local argv = { "ip", "netns", "exec", self.net.n.ns[rank + 1], hosts.tbrt_exe(self.decl) }
  for _, a in ipairs(self.argv_for(rank)) do argv[#argv + 1] = a end
  return self:start(rank, argv)
end

function Group:cleanup()
  if self.net then self.net:remove() end
end

function Group:cleanup_now()
  hosts.PerRank.cleanup_now(self)
  if self.net then self.net:remove_now() end
end

return M
