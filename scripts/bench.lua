-- bench.lua - `make bench`: tbrt beside the tools a user would pick instead,
-- in one run, on loopback only. Every figure is the median of several runs,
-- taken in rounds (scripts/bench/rounds.lua): a ratio is the median of the
-- ratios within each round.
--
--   soft (shared memory), C-driven (build/tbrt-bench) and Lua-driven
--   (scripts/pair.lua): 8 B one-way latency (also with every frame a SEND,
--   TBRT_EAGER=0), 64 KiB and 4 MiB streaming against UCX's ucx_perftest
--   with UCX_TLS=sm (tag_lat, tag_bw); both latencies also in units of a
--   cache line's one-way between the CPUs (build/tbrt-line), the floor;
--   the same streams from and into registered memory (link:register,
--   tbrt_link_mem_reg: direct transfers, the reader's RDMA READs);
--   the tcp link at 64 KiB and 4 MiB against qperf tcp_bw;
--   Debian's perftest on tbrt's libibverbs (tbrt exec): ib_send_lat -s 8
--   and ib_send_bw -s 65536, against the same ucx_perftest figures.
--   zero-copy views against the copying calls and the memcpy ceilings, Lua
--   against C on the same protocol, the tcp link busy-polling
--   (scripts/bench/figures_views.lua); 1..64 links and a ring of 8
--   processes, plotted to build/scale.png (scripts/bench/figures_scale.lua).
--
-- Prints one table (tbrt, anchor, ratio, the range of the rounds' ratios,
-- target) and writes the figures, the table's rows and each round's figures
-- as JSON to build*/bench.json. The range says how far to trust a ratio:
-- on a VM whose host moves its vCPUs the same figure can halve from one
-- minute to the next, and a target met by the median but not by the worst
-- round is met on this machine only some of the time. Environment: TBRT_BENCH_RUNS (5),
-- TBRT_BENCH_PERSONALITY (linux-rc: variable framing; apple-uc posts whole
-- strides and is shown as an extra row).
local cjson = require("cjson")
local uv = require("luv")

local RUNS = tonumber(os.getenv("TBRT_BENCH_RUNS") or "") or 5
local PERS = os.getenv("TBRT_BENCH_PERSONALITY") or "linux-rc"
local build = os.getenv("TBRT_BUILD") or "build"
local root = arg[0]:match("^(.*)/scripts/bench%.lua$") or "."
local tbrt = uv.exepath()
local cbench = build .. "/tbrt-bench"

local function sh(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("*a")
  p:close()
  return out
end

---------------------------------------------------------------------------
-- tbrt, C-driven and Lua-driven

local function c_bench(dev, pers, mode, size, iters, env)
  return function()
    local out = sh(string.format("%s timeout 120 %s %s %s %s %d %d", env or "", cbench, dev,
      pers or "-", mode, size, iters))
    local v = tonumber(out:match("^%S+ ([%d.]+)"))
    return v, not v and out:sub(1, 200) or nil
  end
end

-- the cache line's one-way between the two CPUs (build/tbrt-line): the
-- floor a shared-memory FIFO's 8 B latency stands on
local function line(iters)
  return function()
    local out = sh(string.format("timeout 60 %s/tbrt-line %d", build, iters))
    local v = tonumber(out:match("line_oneway ([%d.]+)"))
    return v, not v and out:sub(1, 200) or nil
  end
end

-- one segment of tbrt-bench's split of a round trip (send, there, back,
-- rtt); `fresh`: run it, else take the segment from the last run's output
-- (the figures of one round trip's split come from one run)
local split_out
local function c_split(segment, size, iters, fresh)
  return function()
    if fresh or not split_out then
      split_out = sh(string.format("timeout 120 %s soft %s split %d %d", cbench, PERS, size, iters))
    end
    local v = tonumber(split_out:match("split_" .. segment .. "_%d+ ([%d.]+) us"))
    return v, not v and split_out:sub(1, 200) or nil
  end
end

local function lua_bench(dev, pers, test, size, iters, extra)
  return function()
    local cmd = string.format("timeout 120 %s %s/scripts/pair.lua --device %s %s --sizes %d " ..
      "--iters %d --test %s --json --quiet %s", tbrt, root, dev,
      pers and ("--personality " .. pers) or "", size, iters, test, extra or "")
    local out = sh(cmd)
    local line = out:match("({.-})%s*$")
    local ok, row = pcall(cjson.decode, line or "")
    if not ok or type(row) ~= "table" then return nil, out:sub(1, 200) end
    -- the typical (median) one-way latency, as ucx_perftest's tag_lat figure is
    if test == "lat" then return row.lat_typical_us end
    return row.bw_push
  end
end

---------------------------------------------------------------------------
-- anchors (command lines as ../shared/tools/anchors.sh runs them)

local port = 13400 + (uv.os_getpid() % 50) * 10
local function next_port()
  port = port + 1
  return port
end

-- Start a server command in the background; returns a stop function.
local function server(cmd)
  local pidfile = os.tmpname()
  os.execute(string.format("(%s >/dev/null 2>&1 & echo $! > %s)", cmd, pidfile))
  local f = io.open(pidfile)
  local pid = f and f:read("*n")
  if f then f:close() end
  os.remove(pidfile)
  os.execute("sleep 0.4")
  return function()
    if pid then os.execute(string.format("kill %d 2>/dev/null; sleep 0.1; kill -9 %d 2>/dev/null", pid, pid)) end
  end
end

local UCX_ENV = "UCX_TLS=sm UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n"

local function ucx(test, size, n)
  return function()
    if sh("command -v ucx_perftest") == "" then return nil, "ucx_perftest not installed" end
    local p = next_port()
    local stop = server(string.format("%s timeout 60 ucx_perftest -p %d", UCX_ENV, p))
    local w = math.max(10, math.floor(n / 10))
    local out = sh(string.format("%s timeout 60 ucx_perftest 127.0.0.1 -p %d -f -t %s -s %d -n %d -w %d",
      UCX_ENV, p, test, size, n, w))
    stop()
    local last
    for line in out:gmatch("[^\n]+") do
      local f = {}
      for x in line:gmatch("%S+") do f[#f + 1] = x end
      if #f >= 8 and f[1]:match("^%d+$") then last = f end
    end
    if not last then return nil, out:sub(-200) end
    if test == "tag_lat" then return tonumber(last[2]) end        -- us, 50th percentile
    return tonumber(last[6]) * 1048576 / 1e9                      -- MB/s (MiB/s) -> GB/s
  end
end

-- perftest through `tbrt exec` (bindings/verbs): ib_send_lat's typical
-- (median) one-way latency in us, ib_send_bw's average in GB/s (perftest's
-- MB are MiB, as UCX's).
local function perftest(prog, size, iters)
  return function()
    if sh("command -v " .. prog) == "" then return nil, prog .. " not installed (perftest)" end
    local p = next_port()
    local run = string.format("%s exec --personality %s -- %s -s %d -n %d -p %d", tbrt, PERS, prog,
      size, iters, p)
    local stop = server("timeout 60 " .. run)
    local out = sh("timeout 60 " .. run .. " 127.0.0.1")
    stop()
    local row = out:match("#bytes[^\n]*\n%s*(%d[^\n]*)")
    local f = {}
    for x in (row or ""):gmatch("[%d.]+") do f[#f + 1] = tonumber(x) end
    if prog == "ib_send_lat" then return f[5], out:sub(-200) end
    return f[4] and f[4] * 1048576 / 1e9, out:sub(-200)
  end
end

local function qperf(test, size)
  return function()
    if sh("command -v qperf") == "" then return nil, "qperf not installed" end
    local p = next_port()
    local stop = server(string.format("timeout 60 qperf -lp %d", p))
    local out = sh(string.format("timeout 30 qperf 127.0.0.1 -lp %d -t 1 -m %d -uu %s", p, size, test))
    stop()
    if test == "tcp_bw" then
      local b = tonumber(out:match("bw%s*=%s*([%d.]+) bytes/sec"))
      return b and b / 1e9, out:sub(1, 200)
    end
    local ns = tonumber(out:match("latency%s*=%s*([%d.]+) ns"))
    return ns and ns / 1000, out:sub(1, 200)
  end
end

---------------------------------------------------------------------------

-- how busy the machine is (figures taken under load are noisy): at the start and the end
local function loadavg()
  local f = io.open("/proc/loadavg")
  local l = f and f:read("*l")
  if f then f:close() end
  return l and tonumber(l:match("^(%S+)")) or nil
end

io.stderr:write(string.format("# tbrt bench: %d runs each, soft personality %s, %d CPUs\n", RUNS,
  PERS, #uv.cpu_info()))
local r = { load_start = loadavg() }
-- in rounds: each figure of a group once a round, back to back, so a
-- figure and its anchor are taken a few seconds apart; the anchors
-- (ucx_perftest, qperf) bracket their round, taken first and last, the
-- round's anchor figure the mean of the two (scripts/bench/rounds.lua)
local rounds = dofile(root .. "/scripts/bench/rounds.lua")(r, RUNS)
rounds.group({
  { "c_lat", "tbrt soft C lat 8 B", c_bench("soft", PERS, "lat", 8, 20000) },
  -- the same with every frame a SEND (no eager frames: README)
  { "c_lat_send", "tbrt soft C lat 8 B, SENDs only", c_bench("soft", PERS, "lat", 8, 20000,
    "TBRT_EAGER=0") },
  { "lua_lat", "tbrt soft Lua lat 8 B", lua_bench("soft", PERS, "lat", 8, 20000) },
  -- where a one-way goes: the sender's send + flush, against its start to
  -- the peer's recv returning (tbrt-bench split; 16 B: index and stamp)
  { "split_send", "tbrt soft C 16 B send + flush", c_split("send", 16, 20000, true) },
  { "split_there", "tbrt soft C 16 B send start -> peer has it", c_split("there", 16, 20000) },
  { "apple_lat", "tbrt soft apple-uc C lat 8 B", c_bench("soft", "apple-uc", "lat", 8, 20000) },
  { "pt_lat", "perftest ib_send_lat 8 B (tbrt exec)", perftest("ib_send_lat", 8, 20000) },
  { "ucx_lat", "ucx_perftest sm tag_lat 8 B", ucx("tag_lat", 8, 100000), bracket = true },
  -- the floor, bracketing the round as the anchor does
  { "line", "cache line one-way between the CPUs", line(100000), bracket = true },
})
-- streaming at one size: C and Lua, from plain and registered memory, one
-- more tbrt figure (perftest, apple-uc), and ucx_perftest
local function stream_group(size, iters, tag, what, extra)
  local list = {
    { "c_bw" .. tag, "tbrt soft C bw " .. what, c_bench("soft", PERS, "bw", size, iters) },
    { "c_reg" .. tag, "tbrt soft C bw " .. what .. " registered",
      c_bench("soft", PERS, "bw-reg", size, iters) },
    { "lua_bw" .. tag, "tbrt soft Lua bw " .. what, lua_bench("soft", PERS, "bw", size, iters) },
    { "lua_reg" .. tag, "tbrt soft Lua bw " .. what .. " registered",
      lua_bench("soft", PERS, "bw", size, iters, "--register") },
  }
  for _, m in ipairs(extra) do list[#list + 1] = m end
  list[#list + 1] = { "ucx_bw" .. tag, "ucx_perftest sm tag_bw " .. what, ucx("tag_bw", size, iters),
    bracket = true }
  rounds.group(list)
end
stream_group(65536, 20000, "64", "64 KiB", {
  { "pt_bw64", "perftest ib_send_bw 64 KiB (tbrt exec)", perftest("ib_send_bw", 65536, 20000) },
  -- every line of each message written before its send (tbrt-bench's
  -- -fresh modes): the others send one buffer again and again, as the anchor
  -- does, and direct READs then find most of it in the reader's cache
  { "c_bw64_fresh", "tbrt soft C bw 64 KiB, fresh lines",
    c_bench("soft", PERS, "bw-fresh", 65536, 20000) },
  { "c_reg64_fresh", "tbrt soft C bw 64 KiB registered, fresh lines",
    c_bench("soft", PERS, "bw-reg-fresh", 65536, 20000) },
})
stream_group(4194304, 300, "4m", "4 MiB", {
  { "apple_bw4m", "tbrt soft apple-uc C bw 4 MiB", c_bench("soft", "apple-uc", "bw", 4194304, 300) },
})
rounds.group({
  { "tcp_bw64", "tbrt tcp C bw 64 KiB", c_bench("tcp", nil, "bw", 65536, 20000) },
  { "qperf_bw64", "qperf tcp_bw 64 KiB", qperf("tcp_bw", 65536), bracket = true },
  { "tcp_bw4m", "tbrt tcp C bw 4 MiB", c_bench("tcp", nil, "bw", 4194304, 300) },
  { "qperf_bw4m", "qperf tcp_bw 4 MiB", qperf("tcp_bw", 4194304), bracket = true },
})

-- 8 B latency on a busy machine (a CI runner, a build beside it): two
-- processes spinning on the two CPUs while tbrt and ucx_perftest measure,
-- the same load for both
local function busy_loops(n)
  local pids = {}
  for _ = 1, n do
    local out = sh("timeout 300 sh -c 'while :; do :; done' >/dev/null 2>&1 & echo $!")
    pids[#pids + 1] = tonumber(out:match("%d+"))
  end
  return function()
    for _, p in ipairs(pids) do os.execute("kill " .. p .. " 2>/dev/null") end
  end
end
do
  local stop = busy_loops(2)
  rounds.group({
    { "busy_c_lat", "tbrt soft C lat 8 B, 2 busy loops", c_bench("soft", PERS, "lat", 8, 5000) },
    { "busy_ucx_lat", "ucx_perftest sm tag_lat 8 B, 2 busy loops", ucx("tag_lat", 8, 20000),
      bracket = true },
  })
  stop()
end

-- the matrix driver's own overhead per cell, on netns hosts (needs root)
do
  local m, why = require("tbrt.matrix.bench").run(tbrt, root)
  if m then
    r.matrix_overhead, r.matrix_wall, r.matrix_budget = m.overhead_median, m.cells_wall, m.measure_sum + m.overhead_sum
    io.stderr:write(string.format("# %-34s median %.3f s, max %.3f s over %d cells (%d not ok); the " ..
      "command %.2f s (hosts, agents and files %.2f s, cells %.2f s) vs the pairs' measurements %.2f s + " ..
      "overhead %.2f s\n", "matrix overhead per cell (netns)", m.overhead_median, m.overhead_max, m.cells,
      m.failed, m.wall, m.wall - m.cells_wall, m.cells_wall, m.measure_sum, m.overhead_sum))
  else
    io.stderr:write("# matrix overhead per cell (netns)     NA: " .. tostring(why) .. "\n")
  end
end

-- views against copies, the memcpy ceilings, the tcp link busy-polling, many
-- links (scripts/bench/figures_*.lua): their figures join r, their rows the table
local more_rows = {}
for _, part in ipairs({ "figures_views", "figures_scale", "figures_udp" }) do
  local rows = dofile(root .. "/scripts/bench/" .. part .. ".lua")({ r = r,
    sh = sh, build = build, tbrt = tbrt, root = root, pers = PERS, runs = RUNS, qperf = qperf,
    rounds = rounds })
  for _, row in ipairs(rows) do more_rows[#more_rows + 1] = row end
end
r.load_end = loadavg()

local function f(v, fmt) return v and string.format(fmt or "%.3f", v) or "NA" end

-- a row: label, tbrt's key, the anchor's key, what the anchor is, target
local row = rounds.row
local rows = {
  row("soft 8 B one-way latency, us (C)", "c_lat", "ucx_lat", "ucx sm tag_lat", "<=", 1.0),
  row("soft 64 KiB bandwidth, GB/s (C)", "c_bw64", "ucx_bw64", "ucx sm tag_bw", ">=", 1.0),
  row("soft 4 MiB bandwidth, GB/s (C)", "c_bw4m", "ucx_bw4m", "ucx sm tag_bw", ">=", 1.0),
  row("soft 8 B one-way latency, us (Lua)", "lua_lat", "ucx_lat", "ucx sm tag_lat", "<=", 1.0),
  row("soft 64 KiB bandwidth, GB/s (Lua)", "lua_bw64", "ucx_bw64", "ucx sm tag_bw", ">=", 1.0),
  row("soft 4 MiB bandwidth, GB/s (Lua)", "lua_bw4m", "ucx_bw4m", "ucx sm tag_bw", ">=", 1.0),
  row("soft 64 KiB bw, registered, GB/s (C)", "c_reg64", "ucx_bw64", "ucx sm tag_bw", ">=", 1.0),
  row("soft 4 MiB bw, registered, GB/s (C)", "c_reg4m", "ucx_bw4m", "ucx sm tag_bw", ">=", 1.0),
  row("soft 64 KiB bw, registered, GB/s (Lua)", "lua_reg64", "ucx_bw64", "ucx sm tag_bw", ">=", 1.0),
  row("soft 4 MiB bw, registered, GB/s (Lua)", "lua_reg4m", "ucx_bw4m", "ucx sm tag_bw", ">=", 1.0),
  row("Lua / C, 4 MiB registered", "lua_reg4m", "c_reg4m", "C-driven", ">=", 0.9),
  row("64 KiB bw, fresh lines each message (C)", "c_bw64_fresh", "c_bw64", "one buffer again", nil),
  row("64 KiB bw reg., fresh lines each msg (C)", "c_reg64_fresh", "c_reg64", "one buffer again", nil),
  row("perftest ib_send_lat 8 B, us (tbrt exec)", "pt_lat", "ucx_lat", "ucx sm tag_lat", "<=", 1.0),
  row("perftest ib_send_bw 64 KiB, GB/s (exec)", "pt_bw64", "ucx_bw64", "ucx sm tag_bw", ">=", 1.0),
  row("tcp 64 KiB bandwidth, GB/s (C)", "tcp_bw64", "qperf_bw64", "qperf tcp_bw", ">=", 0.9),
  row("tcp 4 MiB bandwidth, GB/s (C)", "tcp_bw4m", "qperf_bw4m", "qperf tcp_bw", ">=", 0.9),
  row("Lua / C, 64 KiB bandwidth", "lua_bw64", "c_bw64", "C-driven", ">=", 0.9),
  row("Lua / C, 4 MiB bandwidth", "lua_bw4m", "c_bw4m", "C-driven", nil),
  row("Lua / C, 8 B latency (lower is better)", "lua_lat", "c_lat", "C-driven", nil),
  row("eager / SEND frames, 8 B latency (C)", "c_lat", "c_lat_send", "TBRT_EAGER=0", nil),
  row("16 B one-way: the sender's share, us (C)", "split_send", "split_there", "start -> peer has it", nil),
  -- latencies in cache-line one-ways (tbrt-line, same round): the VM's
  -- speed of the moment divided out; a FIFO's one-way is two of them
  row("8 B latency in cache-line one-ways (C)", "c_lat", "line", "line one-way", nil),
  row("8 B latency in cache-line one-ways (ucx)", "ucx_lat", "line", "line one-way", nil),
  row("soft 8 B latency, 2 busy loops, us (C)", "busy_c_lat", "busy_ucx_lat", "ucx, same load", "<=", 2.0),
  row("apple-uc 8 B latency, us (whole strides)", "apple_lat", "ucx_lat", "ucx sm tag_lat", nil),
  row("apple-uc 4 MiB bandwidth, GB/s", "apple_bw4m", "ucx_bw4m", "ucx sm tag_bw", nil),
}

table.insert(rows, { "matrix driver overhead per cell, s (netns)", r.matrix_overhead, 1, "(seconds)", "<=", 0.5 })
table.insert(rows, { "matrix cells' time / (pairs' + overhead)", r.matrix_wall, r.matrix_budget, "sum of pairs", "<=", 1.0 })

for _, row in ipairs(more_rows) do rows[#rows + 1] = row end

print(string.format("\nload average %s at the start, %s at the end (%d CPUs): above ~0.5 the " ..
  "figures are taken on a busy machine", tostring(r.load_start), tostring(r.load_end), #uv.cpu_info()))
-- the lowest and highest of a row's per-round ratios ("" for fewer than 2)
local function range(list)
  if not list or #list < 2 then return nil end
  local lo, hi = math.huge, -math.huge
  for _, v in ipairs(list) do lo, hi = math.min(lo, v), math.max(hi, v) end
  return lo, hi
end

print(string.format("%-42s %10s %10s  %-16s %7s %11s  %s", "measure (" .. PERS .. ")", "tbrt",
  "anchor", "anchor is", "ratio", "rounds", "target"))
local json_rows = {}
for _, row in ipairs(rows) do
  local q = rounds.ratio_of(row)
  local lo, hi = range(row.ratios)
  local verdict = rounds.verdict(row)
  print(string.format("%-42s %10s %10s  %-16s %7s %11s  %s", row[1], f(row[2]), f(row[3]), row[4],
    f(q, "%.2f"), lo and string.format("%.2f-%.2f", lo, hi) or "", verdict))
  json_rows[#json_rows + 1] = { measure = row[1], tbrt = row[2], anchor = row[3],
    anchor_is = row[4], ratio = q, ratio_min = lo, ratio_max = hi, cmp = row[5],
    target = row[6], verdict = verdict }
end

local out = io.open(build .. "/bench.json", "w")
if out then
  r.runs, r.personality = RUNS, PERS
  r.table = json_rows
  -- each round's figure of every group measured in rounds (false: none)
  r.per_round = rounds.vals
  out:write(cjson.encode(r), "\n")
  out:close()
end
