-- figures_udp.lua - the part of `make bench` (scripts/bench.lua) that
-- measures the soft device's UDP wire between two network namespaces over
-- a veth pair it makes (root; names with this run's pid, removed at the
-- end): RC over RoCEv2/UDP, 64 KiB and 4 MiB streaming beside qperf tcp_bw
-- and udp_bw on the same veth, and 8 B one-way latency beside qperf
-- udp_lat; with no loss and with 1% drop: the kernel drops 1% of what
-- leaves each veth (tc netem loss, or an nftables numgen rule where the
-- kernel has no netem) for tbrt and the anchors alike; with neither, tbrt
-- drops by its own faults on both ends and the anchors are NA. The veths have 9000-byte frames, as
-- RoCE links do, so path MTU 4096 goes unfragmented.
-- Every tbrt message is checked byte for byte (scripts/pair.lua).
--
--   dofile("scripts/bench/figures_udp.lua")(env) -> rows
--
-- env as figures_views.lua's. Compared figures are measured in rounds, the
-- ratio the median of each round's ratio (the machine's load changes).
return function(env)
  local r, sh = env.r, env.sh
  local pid = require("luv").os_getpid()
  local A, B = "tbrtb" .. pid .. "a", "tbrtb" .. pid .. "b"
  local VA, VB = "tbb" .. pid % 100000 .. "a", "tbb" .. pid % 100000 .. "b"
  local ADDR_A, ADDR_B = "198.18.250.1", "198.18.250.2"
  local rounds = math.min(env.runs, 3)

  local median = env.rounds.median

  local function teardown()
    sh("ip netns del " .. A)
    sh("ip netns del " .. B)
  end

  local function setup()
    if sh("id -u"):match("^0") == nil then return "needs root (network namespaces)" end
    teardown()
    local cmds = {
      "ip netns add " .. A, "ip netns add " .. B,
      string.format("ip link add %s netns %s type veth peer name %s netns %s", VA, A, VB, B),
      string.format("ip -n %s addr add %s/24 dev %s", A, ADDR_A, VA),
      string.format("ip -n %s addr add %s/24 dev %s", B, ADDR_B, VB),
      string.format("ip -n %s link set %s up", A, VA), string.format("ip -n %s link set %s up", B, VB),
      string.format("ip -n %s link set lo up", A), string.format("ip -n %s link set lo up", B),
      -- jumbo frames, as RoCE links run: path MTU 4096 fits unfragmented
      string.format("ip -n %s link set %s mtu 9000", A, VA),
      string.format("ip -n %s link set %s mtu 9000", B, VB),
    }
    for _, c in ipairs(cmds) do
      local out = sh(c .. "; echo rc=$?")
      if not out:match("rc=0") then
        teardown()
        return c .. ": " .. out:gsub("%s+$", "")
      end
    end
  end

  -- 1% of the packets leaving each veth dropped by the kernel: "netem",
  -- "nft", or nil when neither can be had; loss(false) undoes it
  local function run_all(cmds)
    for _, c in ipairs(cmds) do
      if not sh(c .. " 2>&1; echo rc=$?"):match("rc=0%s*$") then return false end
    end
    return true
  end
  local loss_by
  local function loss(on)
    if not on then
      for _, x in ipairs { { A, VA }, { B, VB } } do
        if loss_by == "netem" then sh(string.format("ip netns exec %s tc qdisc del dev %s root", x[1], x[2])) end
        if loss_by == "nft" then sh(string.format("ip netns exec %s nft delete table inet tbrtloss", x[1])) end
      end
      loss_by = nil
      return
    end
    local netem, nft = {}, {}
    for _, x in ipairs { { A, VA }, { B, VB } } do
      netem[#netem + 1] = string.format("ip netns exec %s tc qdisc replace dev %s root netem loss 1%%", x[1], x[2])
      nft[#nft + 1] = string.format("ip netns exec %s nft add table inet tbrtloss", x[1])
      nft[#nft + 1] = string.format("ip netns exec %s nft add chain inet tbrtloss out " ..
        "'{ type filter hook output priority 0 ; }'", x[1])
      nft[#nft + 1] = string.format("ip netns exec %s nft add rule inet tbrtloss out oifname %s " ..
        "numgen random mod 100 0 drop", x[1], x[2])
    end
    for _, way in ipairs { { "netem", netem }, { "nft", nft } } do
      loss_by = way[1]
      if run_all(way[2]) then return loss_by end
      loss(false)               -- undo what half worked
    end
  end

  local port = 7400 + pid % 500
  local function next_port() port = port + 1 return port end

  -- a background command in namespace ns, stopped by the returned function
  local function bg(ns, cmd)
    local f = io.popen(string.format("ip netns exec %s sh -c '%s & echo $!'", ns, cmd))
    local p = f:read("*l")
    f:close()
    require("luv").sleep(300)
    return function() if p then sh("kill " .. p .. " 2>/dev/null") end end
  end

  local function qperf(test, size)
    return function()
      if sh("command -v qperf") == "" then return nil, "qperf not installed" end
      local p = next_port()
      local stop = bg(A, string.format("timeout 60 qperf -lp %d >/dev/null 2>&1", p))
      local out = sh(string.format("ip netns exec %s timeout 30 qperf %s -lp %d -t 1 -m %d -uu %s",
        B, ADDR_A, p, size, test))
      stop()
      if test == "udp_lat" then
        local v, unit = out:match("latency%s*=%s*([%d.]+) (%a+)")
        v = tonumber(v)
        if not v then return nil, out:sub(1, 200) end
        return unit == "ns" and v / 1000 or unit == "ms" and v * 1000 or v
      end
      local key = test == "udp_bw" and "recv_bw" or "bw"
      local v, unit = out:match(key .. "%s*=%s*([%d.]+) (%a+)/sec")
      v = tonumber(v)
      if not v then return nil, out:sub(1, 200) end
      local scale = { bytes = 1e-9, KB = 1e-6, MB = 1e-3, GB = 1 }
      return v * (scale[unit] or 1e-9)
    end
  end

  -- RC over UDP: pair.lua's answering end in A, the measuring end in B
  local function tbrt(test, size, faults)
    return function()
      local p = next_port()
      local fl = faults and (" --faults " .. faults) or ""
      local stop = bg(A, string.format("timeout 120 %s %s/scripts/pair.lua --listen %s:%d --once " ..
        "--personality linux-rc --wire udp%s >/dev/null 2>&1", env.tbrt, env.root, ADDR_A, p, fl))
      local iters = test == "lat" and 2000 or (size >= 4194304 and 100 or 2000)
      local out = sh(string.format("ip netns exec %s timeout 120 %s %s/scripts/pair.lua --connect " ..
        "%s:%d --personality linux-rc --wire udp --sizes %d --test %s --iters %d --json%s",
        B, env.tbrt, env.root, ADDR_A, p, size, test, iters, fl))
      stop()
      local row
      for line in out:gmatch("[^\n]+") do
        if line:sub(1, 1) == "{" then row = require("cjson").decode(line) end
      end
      if not row then return nil, out:sub(-300) end
      if test == "lat" then return row.lat_typical_us end
      return row.bw_push
    end
  end

  local why = setup()
  if why then
    io.stderr:write("# soft RC over UDP (netns)            NA: " .. why .. "\n")
    return {}
  end
  local ok, res = pcall(function()
    local rows = {}
    local loss_on = loss
    for _, loss in ipairs { false, true } do
      local tag = loss and " 1% drop" or ""
      local by = loss and loss_on(true)
      local faults = loss and not by and "drop=1%,seed=7" or nil
      local have_netem = not loss or by ~= nil
      if loss then
        io.stderr:write("# 1% drop by " .. (by and ("the kernel (" .. by .. "), tbrt and the anchors alike")
          or "tbrt's own faults (the kernel has neither netem nor nftables): anchors NA") .. "\n")
      end
      local pairs_of = {
        { "bw64", "tbrt UDP RC bw 64 KiB" .. tag, tbrt("bw", 65536, faults), "qperf tcp_bw 64 KiB" .. tag,
          qperf("tcp_bw", 65536), "qperf udp_bw 64000 B" .. tag, qperf("udp_bw", 65000) },
        { "bw4m", "tbrt UDP RC bw 4 MiB" .. tag, tbrt("bw", 4194304, faults), "qperf tcp_bw 4 MiB" .. tag,
          qperf("tcp_bw", 4194304), "qperf udp_bw 64000 B" .. tag, qperf("udp_bw", 65000) },
        { "lat", "tbrt UDP RC lat 8 B" .. tag, tbrt("lat", 8, faults), "qperf udp_lat 8 B" .. tag,
          qperf("udp_lat", 8) },
      }
      for _, pr in ipairs(pairs_of) do
        local tv, av, uv_, ratios = {}, {}, {}, {}
        for _ = 1, rounds do
          local t = pr[3]()
          local a = have_netem and pr[5]() or nil
          local u = pr[7] and have_netem and pr[7]() or nil
          if t then tv[#tv + 1] = t end
          if a then av[#av + 1] = a end
          if u then uv_[#uv_ + 1] = u end
          if t and a and a > 0 then ratios[#ratios + 1] = t / a end
        end
        local key = "udp_" .. pr[1] .. (loss and "_drop1" or "")
        r[key], r[key .. "_anchor"] = median(tv), median(av)
        if pr[7] then r[key .. "_udp_bw"] = median(uv_) end
        io.stderr:write(string.format("# %-34s %s | %s %s%s\n", pr[2], tostring(r[key]), pr[4],
          tostring(r[key .. "_anchor"]), pr[7] and (" | " .. pr[6] .. " " .. tostring(r[key .. "_udp_bw"])) or ""))
        local lat = pr[1] == "lat"
        rows[#rows + 1] = { lat and ("soft UDP RC 8 B latency" .. tag .. ", us (netns)") or
          ("soft UDP RC " .. (pr[1] == "bw64" and "64 KiB" or "4 MiB") .. " bw" .. tag .. ", GB/s (netns)"),
          r[key], r[key .. "_anchor"], lat and "qperf udp_lat" or "qperf tcp_bw",
          lat and "<=" or (pr[1] == "bw4m" and ">=" or nil), lat and 1.5 or 0.8, ratio = median(ratios),
          ratios = ratios }
        if pr[7] then
          rows[#rows + 1] = { "  (qperf udp_bw 64000 B" .. tag .. ", GB/s)",
            r[key .. "_udp_bw"], r[key .. "_anchor"], "qperf tcp_bw", nil }
        end
      end
      if loss then loss_on(false) end
    end
    return rows
  end)
  teardown()
  if not ok then
    io.stderr:write("# soft RC over UDP (netns)            failed: " .. tostring(res) .. "\n")
    return {}
  end
  return res
end
