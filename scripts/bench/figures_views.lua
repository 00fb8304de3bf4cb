-- figures_views.lua - the part of `make bench` (scripts/bench.lua) that
-- measures the zero-copy views against the copying calls, the memcpy
-- ceiling they are compared with, Lua against C on the same protocol, and
-- the tcp link busy-polling and through views, beside qperf; in the same
-- run as the anchors, every byte checked.
--
--   dofile("scripts/bench/figures_views.lua")(env) -> rows
--
-- env: r (the figures so far; these join it), sh(cmd), build, tbrt (the
-- program), root, pers (soft personality), runs, rounds (rounds.lua, over
-- r), qperf(test, size) (the anchor's measuring function). Returns table
-- rows { label, tbrt, anchor, anchor_is, cmp, target, ratio = } for
-- bench.lua.
--
-- Figures that are compared are measured in rounds (scripts/bench/rounds.lua).
return function(env)
  local sh = env.sh
  local stream_c = env.build .. "/tbrt-stream"
  local stream_lua = env.tbrt .. " " .. env.root .. "/scripts/bench/stream.lua"

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

  -- measured in rounds, ratios paired within a round (scripts/bench/rounds.lua)
  local rounds = env.rounds.group

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
    { "xring_4m", "cross-CPU ring: 4 MiB copied in, compared in place", memcpy("xring_4m", "") },
    { "xring_dma_4m", "cross-CPU ring, and a copy between rings (a SEND's)", memcpy("xring_dma_4m", "") },
    { "c_copy4m", "tbrt soft C stream copies 4 MiB", stream(stream_c, "soft", P, "copy", 4194304, 300) },
    { "c_view4m", "tbrt soft C stream views 4 MiB", stream(stream_c, "soft", P, "view", 4194304, 300) },
    { "lua_copy4m", "tbrt soft Lua stream copies 4 MiB", stream(stream_lua, "soft", P, "copy", 4194304, 300) },
    { "lua_view4m", "tbrt soft Lua stream views 4 MiB", stream(stream_lua, "soft", P, "view", 4194304, 300) },
  })
  rounds({
    { "qperf_stream4m", "qperf tcp_bw 4 MiB (paired)", env.qperf("tcp_bw", 4194304),
      bracket = true },
    { "tcp_copy4m", "tbrt tcp C stream copies 4 MiB", stream(stream_c, "tcp", nil, "copy", 4194304, 300) },
    { "tcp_spin4m", "tbrt tcp C stream, spin 50 us, 4 MiB",
      stream(stream_c, "tcp", nil, "copy", 4194304, 300, "TBRT_BENCH_SPIN=50e-6 ") },
    { "tcp_view4m", "tbrt tcp C stream views 4 MiB", stream(stream_c, "tcp", nil, "view", 4194304, 300) },
  })

  local row = env.rounds.row
  return {
    row("views / copies, 64 KiB stream (C)", "c_view64", "c_copy64", "copying path", ">=", 1.2),
    row("views / copies, 4 MiB stream (C)", "c_view4m", "c_copy4m", "copying path", ">=", 1.2),
    row("views 4 MiB stream, GB/s (C)", "c_view4m", "memcpy_4m_hot", "memcpy 4M hot", ">=", 0.6),
    row("views 4 MiB stream, GB/s (C)", "c_view4m", "memcpy_128k_ring16", "memcpy ring16", nil),
    -- the same work across the two CPUs without tbrt (tbrt-memcpy): what a
    -- NIC-backed stream could reach, and with the soft device's copy between
    -- the rings (its DMA, done by a CPU) as a bare program
    row("cross-CPU ring 4 MiB, GB/s", "xring_4m", "memcpy_4m_hot", "memcpy 4M hot", nil),
    row("views 4 MiB stream, GB/s (C)", "c_view4m", "xring_dma_4m", "ring + DMA copy", nil),
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
