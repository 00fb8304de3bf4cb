-- figures_views.lua - the part of `make bench` (scripts/bench.lua) that
-- measures the zero-copy views against the copying calls, the memcpy
-- ceiling they are compared with, Lua against C on the same protocol, and
-- the tcp link busy-polling and through views, beside qperf; in the same
-- run as the anchors, every byte checked.
--
--   dofile("scripts/bench/figures_views.lua")(env) -> rows
--
-- env: r (the figures so far; these join it), sh(cmd), build, tbrt (the
-- program), root, pers (soft personality), runs, qperf(test, size) (the
-- anchor's measuring function). Returns table rows { label, tbrt, anchor,
-- anchor_is, cmp, target, ratio = } for bench.lua.
--
-- Figures that are compared are measured in rounds: one round runs each of
-- a group once, back to back, and a ratio is the median over the rounds of
-- the ratio within each round. On a shared machine the load changes from
-- one minute to the next; a ratio of two medians taken minutes apart would
-- compare two different machines.
return function(env)
  local r, sh = env.r, env.sh
  local stream_c = env.build .. "/tbrt-stream"
  local stream_lua = env.tbrt .. " " .. env.root .. "/scripts/bench/stream.lua"

  local function median(list)
    local t = {}
    for i, v in ipairs(list) do t[i] = v end
    table.sort(t)
    local n = #t
    if n == 0 then return nil end
    return n % 2 == 1 and t[(n + 1) / 2] or (t[n / 2] + t[n / 2 + 1]) / 2
  end

  local function figure(out, name) return tonumber(out:match(name .. " ([%d.]+)")) end

  -- one run of a stream program: GB/s, or nil, why
  local function stream(cmd, dev, pers, mode, size, iters, envs)
    return function()
      local out = sh(string.format("%stimeout 120 %s %s %s %s %d %d", envs or "", cmd, dev,
        pers or "-", mode, size, iters))
      local v = figure(out, "stream_" .. mode .. "_" .. size)
      return v, not v and out:sub(1, 200) or nil
    end
  end

  -- one tbrt-memcpy run a round gives all its figures: the first of them
  -- in a round (fresh) runs it, the others read that run's output
  local memcpy_out = ""
  local function memcpy(which, prefix, fresh)
    return function()
      if fresh then memcpy_out = sh("timeout 60 " .. env.build .. "/tbrt-memcpy") end
      local out = memcpy_out
      local v = figure(out, (prefix or "memcpy_") .. which)
      return v, not v and out:sub(1, 200) or nil
    end
  end

  -- rounds of a group { {key, label, fn}, ... }: r[key] = the median of its
  -- runs; vals[key][i] = its figure in round i (for paired ratios)
  local vals = {}
  local function rounds(group)
    for _, m in ipairs(group) do vals[m[1]] = {} end
    local why = {}
    for i = 1, env.runs do
      for _, m in ipairs(group) do
        local v, w = m[3]()
        vals[m[1]][i] = v or false
        if not v then why[m[1]] = w end
      end
    end
    for _, m in ipairs(group) do
      local ok = {}
      for _, v in ipairs(vals[m[1]]) do if v then ok[#ok + 1] = v end end
      r[m[1]] = median(ok)
      io.stderr:write(string.format("# %-34s %s\n", m[2], r[m[1]] and
        string.format("%.4g (%d runs)", r[m[1]], #ok) or ("NA: " .. tostring(why[m[1]]))))
    end
  end

  -- the median of a/b over the rounds where both were measured
  local function paired(a, b)
    local q = {}
    for i = 1, env.runs do
      local x, y = vals[a] and vals[a][i], vals[b] and vals[b][i]
      if x and y and y ~= 0 then q[#q + 1] = x / y end
    end
    return median(q)
  end

  local P = env.pers
  rounds({
    { "c_copy64", "tbrt soft C stream copies 64 KiB", stream(stream_c, "soft", P, "copy", 65536, 20000) },
    { "c_view64", "tbrt soft C stream views 64 KiB", stream(stream_c, "soft", P, "view", 65536, 20000) },
    { "lua_copy64", "tbrt soft Lua stream copies 64 KiB", stream(stream_lua, "soft", P, "copy", 65536, 20000) },
    { "lua_view64", "tbrt soft Lua stream views 64 KiB", stream(stream_lua, "soft", P, "view", 65536, 20000) },
  })
  rounds({
    { "memcpy_4m_hot", "memcpy 4 MiB hot (in-cache ceiling)", memcpy("4m_hot", nil, true) },
    { "memcpy_128k_ring16", "memcpy 128 KiB into a 16-slot ring", memcpy("128k_ring16") },
    { "memcpy_64k_skew16", "memcpy 64 KiB, dst 16 B past src", memcpy("64k_skew16") },
    { "memcpy_64k_aligned", "memcpy 64 KiB, same page offsets", memcpy("64k_aligned") },
    { "bulk_copy_64k_skew16", "bulk_copy 64 KiB, dst 16 B past src", memcpy("64k_skew16", "bulk_copy_") },
    { "c_copy4m", "tbrt soft C stream copies 4 MiB", stream(stream_c, "soft", P, "copy", 4194304, 300) },
    { "c_view4m", "tbrt soft C stream views 4 MiB", stream(stream_c, "soft", P, "view", 4194304, 300) },
    { "lua_copy4m", "tbrt soft Lua stream copies 4 MiB", stream(stream_lua, "soft", P, "copy", 4194304, 300) },
    { "lua_view4m", "tbrt soft Lua stream views 4 MiB", stream(stream_lua, "soft", P, "view", 4194304, 300) },
  })
  rounds({
    { "qperf_stream4m", "qperf tcp_bw 4 MiB (paired)", env.qperf("tcp_bw", 4194304) },
    { "tcp_copy4m", "tbrt tcp C stream copies 4 MiB", stream(stream_c, "tcp", nil, "copy", 4194304, 300) },
    { "tcp_spin4m", "tbrt tcp C stream, spin 50 us, 4 MiB",
      stream(stream_c, "tcp", nil, "copy", 4194304, 300, "TBRT_BENCH_SPIN=50e-6 ") },
    { "tcp_view4m", "tbrt tcp C stream views 4 MiB", stream(stream_c, "tcp", nil, "view", 4194304, 300) },
  })

  local function row(label, a, b, is, cmp, target)
    return { label, r[a], r[b], is, cmp, target, ratio = paired(a, b) }
  end
  return {
    row("views / copies, 64 KiB stream (C)", "c_view64", "c_copy64", "copying path", ">=", 1.2),
    row("views / copies, 4 MiB stream (C)", "c_view4m", "c_copy4m", "copying path", ">=", 1.2),
    row("views 4 MiB stream, GB/s (C)", "c_view4m", "memcpy_4m_hot", "memcpy 4M hot", ">=", 0.6),
    row("views 4 MiB stream, GB/s (C)", "c_view4m", "memcpy_128k_ring16", "memcpy ring16", nil),
    -- glibc's REP MOVSB cliff (util/copy.h): what the core's copies avoid
    row("memcpy 64 KiB, dst 16 B past src, GB/s", "memcpy_64k_skew16", "memcpy_64k_aligned",
      "same offsets", nil),
    row("bulk_copy 64 KiB, dst 16 B past src, GB/s", "bulk_copy_64k_skew16", "memcpy_64k_aligned",
      "same offsets", nil),
    row("views / copies, 64 KiB stream (Lua)", "lua_view64", "lua_copy64", "copying path", ">=", 1.2),
    row("views / copies, 4 MiB stream (Lua)", "lua_view4m", "lua_copy4m", "copying path", ">=", 1.2),
    row("Lua / C, 64 KiB stream copies", "lua_copy64", "c_copy64", "C-driven", ">=", 0.9),
    row("Lua / C, 4 MiB stream copies", "lua_copy4m", "c_copy4m", "C-driven", ">=", 0.9),
    row("Lua / C, 4 MiB stream views", "lua_view4m", "c_view4m", "C-driven", ">=", 0.9),
    row("tcp 4 MiB stream, GB/s (C)", "tcp_copy4m", "qperf_stream4m", "qperf tcp_bw", ">=", 0.9),
    row("tcp 4 MiB stream, spin 50 us, GB/s (C)", "tcp_spin4m", "qperf_stream4m", "qperf tcp_bw", ">=", 0.9),
    row("tcp 4 MiB stream through views, GB/s (C)", "tcp_view4m", "qperf_stream4m", "qperf tcp_bw", nil),
  }
end
