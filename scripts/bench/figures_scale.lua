-- figures_scale.lua - the part of `make bench` (scripts/bench.lua) that
-- measures what one more link costs: 1, 2, 4, 16 and 64 links between two
-- processes, driven from C (build/tbrt-scale) and from Lua
-- (scripts/bench/scale.lua), and 8 processes in a ring (C), beside the
-- same ring through Open MPI's shared memory (build/mpi-ring,
-- scripts/bench/mpi_ring.c, under mpirun; more processes than CPUs, as a
-- CI runner's collective tests have them). For each: the
-- aggregate bandwidth, the per-link 8 B latency (median link and worst),
-- the memory and the setup time per link. Prints the curve, plots it with
-- gnuplot (build/scale.png, the data in build/scale.dat), and returns rows
-- for bench.lua's table comparing 64 links with 1. Every byte is checked.
--
--   dofile("scripts/bench/figures_scale.lua")(env) -> rows
--
-- env as figures_views.lua's. TBRT_BENCH_SCALE_RUNS (3) rounds, each
-- running every point once (the ratios 64/1 are the median of the ratios
-- within a round); the median of each figure is kept;
-- TBRT_BENCH_SCALE_LINKS ("1,2,4,16,64").
local cjson = require("cjson")

return function(env)
  local r, sh = env.r, env.sh
  local runs = tonumber(os.getenv("TBRT_BENCH_SCALE_RUNS") or "") or 3
  local counts = {}
  for n in (os.getenv("TBRT_BENCH_SCALE_LINKS") or "1,2,4,16,64"):gmatch("%d+") do
    counts[#counts + 1] = tonumber(n)
  end
  local SIZE, ITERS = 65536, 20000
  local KEYS = { "bw", "lat_us", "lat_max_us", "rss_kib", "setup_ms" }

  local median = env.rounds.median

  -- "links=4 setup_ms=1.2 ..." (C) or a JSON object (Lua) -> table
  local function parse(out)
    local row = {}
    local line = out:match("({.-})%s*$")
    if line then
      local ok, t = pcall(cjson.decode, line)
      if ok and type(t) == "table" then return t end
    end
    for k, v in out:gmatch("([%w_]+)=([%d.]+)") do row[k] = tonumber(v) end
    return next(row) and row or nil
  end

  -- one run of cmd: its figures, or nil and the output
  local function once(cmd)
    local out = sh("timeout 300 " .. cmd)
    local row = parse(out)
    if row and row.bw then return row end
    return nil, out:sub(1, 200)
  end

  -- the median of each figure over the runs (a list of rows), or nil
  local function medians(name, list, why)
    if #list == 0 then
      io.stderr:write(string.format("# %-34s NA: %s\n", name, tostring(why)))
      return nil
    end
    local m = {}
    for _, k in ipairs(KEYS) do
      local v = {}
      for _, row in ipairs(list) do if row[k] then v[#v + 1] = row[k] end end
      m[k] = median(v)
    end
    if not m.rss_kib then       -- the ring: a hop's latency, no per-link figures
      io.stderr:write(string.format("# %-34s bw %.3f GB/s, lat %.2f us a hop (%d runs)\n", name,
        m.bw, m.lat_us or 0, #list))
      return m
    end
    io.stderr:write(string.format("# %-34s bw %.3f GB/s, lat %.2f us (worst %.2f), %s KiB and " ..
      "%.2f ms a link (%d runs)\n", name, m.bw, m.lat_us or 0, m.lat_max_us or 0,
      string.format("%.0f", m.rss_kib), m.setup_ms or 0, #list))
    return m
  end

  -- rounds: each runs every point once, so the points of one round share
  -- the machine's load of that moment (ratios between them are paired)
  local P = env.pers
  local runs_of = { c = {}, lua = {}, ring = {}, mpi = {} }
  local why = {}
  local function cmd_c(n)
    return string.format("%s/tbrt-scale soft %s links %d %d %d", env.build, P, n, SIZE, ITERS)
  end
  local function cmd_lua(n)
    return string.format("%s %s/scripts/bench/scale.lua --links %d --size %d --iters %d " ..
      "--personality %s", env.tbrt, env.root, n, SIZE, ITERS, P)
  end
  -- the anchor ring: Open MPI's vader (shared memory) between 8 ranks on
  -- this host, the same sizes (make bench builds build/mpi-ring with mpicc)
  local mpi = env.build .. "/mpi-ring"
  local function mpi_ring()
    if sh("command -v mpirun") == "" then return nil, "mpirun not installed" end
    local f = io.open(mpi)
    if not f then return nil, mpi .. " not built (mpicc: libopenmpi-dev)" end
    f:close()
    local root = sh("id -u"):match("^0") and "--allow-run-as-root " or ""
    return once(string.format("mpirun %s--oversubscribe --bind-to none -np 8 --mca btl self,vader " ..
      "%s %d %d 2>&1", root, mpi, SIZE, 5000))
  end
  for round = 1, runs do
    for _, n in ipairs(counts) do
      for _, side in ipairs({ "c", "lua" }) do
        runs_of[side][n] = runs_of[side][n] or {}
        local row, w = once(side == "c" and cmd_c(n) or cmd_lua(n))
        runs_of[side][n][round] = row or false
        if not row then why[side .. n] = w end
      end
    end
    local row, w = once(string.format("%s/tbrt-scale soft %s ring 8 %d %d", env.build, P, SIZE, 5000))
    runs_of.ring[round] = row or false
    if not row then why.ring = w end
    row, w = mpi_ring()
    runs_of.mpi[round] = row or false
    if not row then why.mpi = w end
  end
  local function good(list)
    local ok = {}
    for _, row in ipairs(list or {}) do if row then ok[#ok + 1] = row end end
    return ok
  end
  local curve = { c = {}, lua = {} }
  for _, n in ipairs(counts) do
    for _, side in ipairs({ "c", "lua" }) do
      local m = medians(string.format("scale %s, %d links", side == "c" and "C" or "Lua", n),
        good(runs_of[side][n]), why[side .. n])
      if m then m.links = n ; curve[side][#curve[side] + 1] = m end
    end
  end
  curve.ring = medians("scale C, ring of 8 processes", good(runs_of.ring), why.ring)
  curve.mpi = medians("Open MPI ring of 8 processes", good(runs_of.mpi), why.mpi)
  r.scale = curve

  -- the median over the rounds of side's figure k at n links over 1 link
  local function paired(side, k, n)
    local q = {}
    for round = 1, runs do
      local a = runs_of[side][n] and runs_of[side][n][round]
      local b = runs_of[side][1] and runs_of[side][1][round]
      if a and b and a[k] and b[k] and b[k] ~= 0 then q[#q + 1] = a[k] / b[k] end
    end
    return median(q), q
  end

  -- the curve, as a table
  local function f(v, fmt) return v and string.format(fmt, v) or "-" end
  print(string.format("\nscale (%s, %d B messages): aggregate GB/s, 8 B one-way us (median link / " ..
    "worst), KiB and ms per link", P, SIZE))
  print(string.format("%6s | %8s %8s %8s %7s %7s | %8s %8s %8s %7s %7s", "links", "C GB/s", "lat",
    "worst", "KiB", "ms", "Lua GB/s", "lat", "worst", "KiB", "ms"))
  local by_n = {}
  for _, side in ipairs({ "c", "lua" }) do
    for _, row in ipairs(curve[side]) do
      by_n[row.links] = by_n[row.links] or {}
      by_n[row.links][side] = row
    end
  end
  for _, n in ipairs(counts) do
    local c, l = by_n[n] and by_n[n].c or {}, by_n[n] and by_n[n].lua or {}
    print(string.format("%6d | %8s %8s %8s %7s %7s | %8s %8s %8s %7s %7s", n, f(c.bw, "%.3f"),
      f(c.lat_us, "%.2f"), f(c.lat_max_us, "%.2f"), f(c.rss_kib, "%.0f"), f(c.setup_ms, "%.2f"),
      f(l.bw, "%.3f"), f(l.lat_us, "%.2f"), f(l.lat_max_us, "%.2f"), f(l.rss_kib, "%.0f"),
      f(l.setup_ms, "%.2f")))
  end
  if curve.ring then
    print(string.format("ring of 8 processes (C): %.3f GB/s in all, %.2f us per hop", curve.ring.bw,
      curve.ring.lat_us or 0))
  end
  if curve.mpi then
    print(string.format("ring of 8 processes (Open MPI, sm): %.3f GB/s in all, %.2f us per hop",
      curve.mpi.bw, curve.mpi.lat_us or 0))
  end

  -- the plot: four panels over the number of links
  local dat = env.build .. "/scale.dat"
  local fh = io.open(dat, "w")
  if fh then
    fh:write("# links c_bw c_lat c_rss_kib c_setup_ms lua_bw lua_lat lua_rss_kib lua_setup_ms\n")
    for _, n in ipairs(counts) do
      local c, l = by_n[n] and by_n[n].c or {}, by_n[n] and by_n[n].lua or {}
      local function v(x) return x and string.format("%.6g", x) or "NaN" end
      fh:write(table.concat({ n, v(c.bw), v(c.lat_us), v(c.rss_kib), v(c.setup_ms), v(l.bw),
        v(l.lat_us), v(l.rss_kib), v(l.setup_ms) }, " "), "\n")
    end
    fh:close()
    local png = env.build .. "/scale.png"
    local gp = string.format([[
set terminal pngcairo size 1200,900 font ",10"
set output '%s'
set multiplot layout 2,2 title "tbrt: N links between two processes (%s, soft %s, %d B messages)"
set logscale x 2
set xlabel "links"
set key top right
set grid
set title "aggregate bandwidth"
set ylabel "GB/s"
set yrange [0:*]
plot '%s' u 1:2 w lp t "C", '' u 1:6 w lp t "Lua"
set title "8 B one-way latency, median link"
set ylabel "us"
plot '%s' u 1:3 w lp t "C", '' u 1:7 w lp t "Lua"
set title "memory per link (resident)"
set ylabel "KiB"
plot '%s' u 1:4 w lp t "C", '' u 1:8 w lp t "Lua"
set title "setup time per link"
set ylabel "ms"
plot '%s' u 1:5 w lp t "C", '' u 1:9 w lp t "Lua"
unset multiplot
]], png, os.date("%Y-%m-%d %H:%M"), P, SIZE, dat, dat, dat, dat)
    local gpf = env.build .. "/scale.gp"
    local g = io.open(gpf, "w")
    if g then
      g:write(gp)
      g:close()
      local out = sh("gnuplot " .. gpf)
      io.stderr:write(out ~= "" and ("# gnuplot: " .. out:sub(1, 200) .. "\n")
        or ("# scale curve plotted: " .. png .. "\n"))
    end
  end

  local function at(side, n)
    for _, row in ipairs(curve[side]) do if row.links == n then return row end end
    return {}
  end
  local hi = counts[#counts]
  local c1, cn, l1, ln = at("c", 1), at("c", hi), at("lua", 1), at("lua", hi)
  local lbl = string.format("%d links / 1", hi)
  local function row(label, side, k, a, b, cmp, target)
    local q, list = paired(side, k, hi)
    return { label, a[k], b[k], "1 link", cmp, target, ratio = q, ratios = list }
  end
  local ring1, hop1, ringm, hopm = {}, {}, {}, {}
  for round = 1, runs do
    local a, b = runs_of.ring[round], runs_of.c[1] and runs_of.c[1][round]
    if a and b and b.bw ~= 0 then ring1[#ring1 + 1] = a.bw / b.bw end
    if a and b and b.lat_us and b.lat_us ~= 0 then hop1[#hop1 + 1] = a.lat_us / b.lat_us end
    local m = runs_of.mpi[round]
    if a and m and m.bw ~= 0 then ringm[#ringm + 1] = a.bw / m.bw end
    if a and m and m.lat_us and m.lat_us ~= 0 then hopm[#hopm + 1] = a.lat_us / m.lat_us end
  end
  local mpi1 = curve.mpi or {}
  return {
    row("scale C: aggregate GB/s, " .. lbl, "c", "bw", cn, c1, nil),
    row("scale C: latency per link, " .. lbl, "c", "lat_us", cn, c1, "<=", 1.5),
    row("scale C: memory per link, " .. lbl, "c", "rss_kib", cn, c1, "<=", 1.5),
    row("scale C: setup per link, " .. lbl, "c", "setup_ms", cn, c1, "<=", 1.5),
    row("scale Lua: aggregate GB/s, " .. lbl, "lua", "bw", ln, l1, nil),
    row("scale Lua: latency per link, " .. lbl, "lua", "lat_us", ln, l1, "<=", 1.5),
    row("scale Lua: memory per link, " .. lbl, "lua", "rss_kib", ln, l1, "<=", 1.5),
    row("scale Lua: setup per link, " .. lbl, "lua", "setup_ms", ln, l1, "<=", 1.5),
    { "ring of 8 processes: GB/s in all (C)", curve.ring and curve.ring.bw, c1.bw,
      "2 procs, 1 link", nil, ratio = median(ring1), ratios = ring1 },
    -- 8 processes on this machine's CPUs: a hop waits for the CPU the
    -- waiters share (cpu_waiters.c), not only for the message
    { "ring of 8 procs: 8 B latency a hop, us (C)", curve.ring and curve.ring.lat_us,
      c1.lat_us, "2 procs, 1 link", nil, ratio = median(hop1), ratios = hop1 },
    -- the same ring through Open MPI (its ranks yield when oversubscribed)
    { "ring of 8 processes: GB/s in all (C)", curve.ring and curve.ring.bw, mpi1.bw,
      "Open MPI ring", ">=", 1, ratio = median(ringm), ratios = ringm },
    { "ring of 8 procs: 8 B latency a hop, us (C)", curve.ring and curve.ring.lat_us,
      mpi1.lat_us, "Open MPI ring", "<=", 1, ratio = median(hopm), ratios = hopm },
  }
end
