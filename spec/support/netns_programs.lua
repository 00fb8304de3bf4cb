-- netns_programs.lua - an unmodified verbs program's server in one network
-- namespace and its client in another, each through `tbrt exec --wire udp`
-- (`ip netns exec NS tbrt exec ...`), for spec/verbs_netns_spec.lua. The
-- namespaces are netns.lua's. Every wait is bounded; the client starts once
-- the server listens on its TCP port, watched in the server's own
-- namespace (/proc/PID/net/tcp: `ip netns exec` and `tbrt exec` both exec,
-- so the pid is the program's), so no probe connection disturbs it.
--
--   local P = require("netns_programs")
--   local srv, cli = P.pair(net, function(host) return { "ibv_rc_pingpong", ... } end,
--     { port = 18515, client_extra = { net.cables[1].addr[1] } })
--   P.gid_index(net.hosts[1], "198.19.7.1")   -- its RoCE v2 GID's index
--   P.packets(net)                           -- packets across the cable so far
local task = require("tbrt.task")
local cjson = require("cjson")
local H = require("helpers")
local N = require("netns")
local X = require("programs")

local P = {}

P.TIMEOUT = 30          -- one program
P.LISTEN_TIMEOUT = 15   -- a server getting to listen
P.ORPHAN_TIMEOUT = 3    -- a server whose client failed: it waits for nobody now

local function exec_argv(argv)
  local a = { H.tbrt, "exec", "--wire", "udp", "--" }
  for _, w in ipairs(argv) do a[#a + 1] = w end
  return a
end

-- The index of the RoCE v2 GID of this IPv4 address in the host's soft
-- device (ibv_devinfo -v in its namespace), or nil and why.
function P.gid_index(host, addr)
  local r = N.run_in(host, exec_argv { "ibv_devinfo", "-v" }, { timeout = P.TIMEOUT })
  if r.code ~= 0 then return nil, H.describe(r) end
  for idx, gid in r.stdout:gmatch("GID%[%s*(%d+)%]:%s*(%S+), RoCE v2") do
    if gid == "::ffff:" .. addr then return tonumber(idx) end
  end
  return nil, "no RoCE v2 GID ::ffff:" .. addr .. " in\n" .. r.stdout
end

-- Packets host 1's end of cable 1 sent and received so far.
function P.packets(net)
  local h, dev = net.cables[1].hosts[1], net.cables[1].dev[1]
  local ok, out = N.sh("ip -n " .. h.name .. " -j -s link show dev " .. dev)
  if not ok then return 0 end
  local t = cjson.decode(out)[1]
  local s = t and t.stats64 or {}
  return (s.rx and s.rx.packets or 0) + (s.tx and s.tx.packets or 0)
end

-- argv_of(i) is the program's argv in host i (1: the server, 2: the
-- client); the client gets opts.client_extra after it; opts.env_of(i),
-- if given, the environment changes in host i. Returns both results
-- (H.run's shape); a server whose client failed is stopped within
-- P.ORPHAN_TIMEOUT.
function P.pair(net, argv_of, opts)
  opts = opts or {}
  local cli_argv = argv_of(2)
  for _, w in ipairs(opts.client_extra or {}) do cli_argv[#cli_argv + 1] = w end
  local env_of = opts.env_of or function() return nil end
  local srv, cli
  task.run(function()
    local s = N.start_in(net.hosts[1], exec_argv(argv_of(1)), { env = env_of(1) })
    local deadline = H.now() + P.LISTEN_TIMEOUT
    while s.code == nil and not X.listening(opts.port, s.pid) and H.now() < deadline do
      task.sleep(0.02)
    end
    if s.code == nil and X.listening(opts.port, s.pid) then
      cli = N.run_in(net.hosts[2], exec_argv(cli_argv), { timeout = opts.timeout or P.TIMEOUT,
        env = env_of(2) })
    else
      cli = { code = -1, stdout = "", stderr = "the server never listened on port " .. opts.port,
        timed_out = false }
    end
    local failed = cli.code ~= 0 or cli.signal ~= nil and cli.signal ~= 0
    srv = s:wait(failed and P.ORPHAN_TIMEOUT or opts.timeout or P.TIMEOUT)
  end)
  return srv, cli
end

P.describe = X.describe

return P
