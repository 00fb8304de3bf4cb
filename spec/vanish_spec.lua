-- vanish_spec.lua - a peer host that vanishes (its interface goes down: no
-- FIN, no RST, nothing answers) is reported gone within the liveness bound,
-- without TCP_USER_TIMEOUT: on a tcp link that is sending (our bytes wait
-- for an acknowledgement that never comes, read from TCP_INFO) and on one
-- that is only receiving (keepalive: what an RDMA link's idle bootstrap
-- socket relies on too; the soft wire cannot reach into another namespace),
-- while a stopped peer is not (liveness_spec.lua). The
-- peer runs in a network namespace of this run's own (198.18.0.0/15, a veth
-- pair named after the pid), removed at the end, also on failure; without
-- root or ip(8) the spec skips, saying why.
local cjson = require("cjson")
local ffi = require("ffi")
local tbrt = require("tbrt")
local H = require("helpers")
local L = require("links")

pcall(ffi.cdef, "int getpid(void); unsigned int geteuid(void);")
local PID = ffi.C.getpid()
local NS, VA, VB = "tbrtv" .. PID, "tva" .. PID, "tvb" .. PID
local A, B = "198.18.0.1", "198.18.0.2"
local LIVENESS = 1

local function sh(cmd)
  local r = H.run("/bin/sh", { "-c", cmd .. " 2>&1" }, { timeout = 10 })
  return r.code == 0, r.stdout
end

local why_not
if ffi.C.geteuid() ~= 0 then
  why_not = "needs root to make a network namespace"
elseif not sh("command -v ip") then
  why_not = "needs ip(8) (iproute2)"
end

local function net_up()
  local steps = {
    "ip netns add " .. NS,
    "ip link add " .. VA .. " type veth peer name " .. VB,
    "ip link set " .. VB .. " netns " .. NS,
    "ip addr add " .. A .. "/30 dev " .. VA, "ip link set " .. VA .. " up",
    "ip netns exec " .. NS .. " ip addr add " .. B .. "/30 dev " .. VB,
    "ip netns exec " .. NS .. " ip link set " .. VB .. " up",
    "ip netns exec " .. NS .. " ip link set lo up",
  }
  for _, s in ipairs(steps) do
    local ok, out = sh(s)
    if not ok then return nil, s .. ": " .. out end
  end
  return true
end

local function net_down()
  sh("ip link del " .. VA)
  sh("ip netns del " .. NS)
end

-- What a run that died (its pid is gone) left behind: its veth holds the
-- same addresses and would take this run's packets.
local function sweep_dead()
  local p = io.popen("ip -o link show 2>/dev/null")
  local out = p:read("*a")
  p:close()
  for pid in out:gmatch("%d+: tva(%d+)[@:]") do
    if not io.open("/proc/" .. pid .. "/stat") then
      sh("ip link del tva" .. pid)
      sh("ip netns del tbrtv" .. pid)
    end
  end
end

-- The peer in the namespace, connected to us over the veth; returns link, peer.
local function peer_link(mode, opts)
  local srv = assert(tbrt.listen(A, 0, opts))
  local peer = L.spawn("/usr/sbin/ip", { "netns", "exec", NS, H.tbrt, H.root .. "/spec/support/peer.lua",
    mode, srv.port, cjson.encode(opts) }, { PEER_HOST = A })
  local l, err = srv:accept(20)
  srv:close()
  assert(l, err)
  assert(peer:expect("ready", 10), peer:stdout())
  return l, peer
end

-- The peer's host vanishes: its end of the wire goes down.
local function vanish()
  assert(sh("ip netns exec " .. NS .. " ip link set " .. VB .. " down"))
end

local describe_ns = why_not and pending or describe
describe_ns("a peer host that vanishes" .. (why_not and (" (" .. why_not .. ")") or ""), function()
  setup(function()
    net_down()                       -- a run of this pid that died half way
    sweep_dead()                     -- and runs of others
    local ok, err = net_up()
    if not ok then net_down() error(err) end
  end)
  teardown(net_down)

  it("is gone within the liveness bound for a tcp link that is sending", L.async(function()
    local l, peer = peer_link("sink", { device = "tcp", liveness = LIVENESS })
    local buf = L.pattern(2 ^ 20)
    assert(l:send(buf, 2 ^ 20)) ; assert(l:flush())
    vanish()
    local t0, err = tbrt.now(), nil
    for _ = 1, 10000 do
      local ok, e = l:send(buf, 2 ^ 20, 10)
      if ok then ok, e = l:flush(10) end
      if not ok then err = e break end
    end
    local dt = tbrt.now() - t0
    assert.matches("^ETIMEDOUT: link %d+: peer host acknowledged nothing for [%d.]+ s while %d+ " ..
      "segments of ours waited %(peer host dead or unreachable; liveness bound 1 s%)", err)
    assert.is_true(dt < LIVENESS + 1.5, "noticed after " .. dt .. " s")
    assert.equal("broken", l:info().state)
    peer:kill("sigkill") ; peer:wait(5)
    l:close()
  end))

  it("is gone within the keepalive bound for a link that only waits", L.async(function()
    assert(sh("ip netns exec " .. NS .. " ip link set " .. VB .. " up"))
    local l, peer = peer_link("sink", { device = "tcp", liveness = LIVENESS })
    require("tbrt.task").sleep(0.3)  -- the readiness byte acknowledged: nothing of ours waits
    vanish()
    local t0 = tbrt.now()
    local data, err = l:recv(1, 10)
    local dt = tbrt.now() - t0
    assert.is_nil(data)
    -- keepalive probes each second from the first idle second, at least two
    assert.is_true(dt < 4, "noticed after " .. dt .. " s: " .. tostring(err))
    assert.matches("^ETIMEDOUT: link %d+: recv: Connection timed out %(peer gone%)", err)
    assert.equal("broken", l:info().state)
    peer:kill("sigkill") ; peer:wait(5)
    l:close()
  end))
end)
