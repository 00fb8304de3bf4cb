-- figures_views.lua - the part of `make bench` (scripts/bench.lua) that
-- measures the zero-copy views against the copying calls, the memcpy
-- ceilings they are compared with, Lua against C on the same protocol, and
-- the tcp link busy-polling and through views; in the same run as the
-- anchors, every figure a median of the bench's runs, every byte checked.
--
--   dofile("scripts/bench/figures_views.lua")(env) -> rows
--
-- env: r (the figures so far; these join it), measure(name, fn), sh(cmd),
-- build, tbrt (the program), root, pers (soft personality), runs. Returns
-- the table rows { label, tbrt, anchor, anchor_is, cmp, target } for
-- bench.lua's table.
return function(env)
  local r, measure, sh = env.r, env.measure, env.sh
  local stream_c = env.build .. "/tbrt-stream"
  local stream_lua = env.tbrt .. " " .. env.root .. "/scripts/bench/stream.lua"

  local function figure(out, name)
    return tonumber(out:match(name .. " ([%d.]+)"))
  end

  -- one run of a stream program: GB/s, or nil, why
  local function stream(cmd, dev, pers, mode, size, iters, envs)
    return function()
      local out = sh(string.format("%stimeout 120 %s %s %s %s %d %d", envs or "", cmd, dev,
        pers or "-", mode, size, iters))
      local v = figure(out, "stream_" .. mode .. "_" .. size)
      return v, not v and out:sub(1, 200) or nil
    end
  end

  -- tbrt-memcpy prints both ceilings per run: run it once per bench run
  local ceil = { ["4m_hot"] = {}, ["128k_ring16"] = {} }
  local function memcpy(which)
    return function()
      if #ceil[which] == 0 then
        for _ = 1, env.runs do
          local out = sh("timeout 60 " .. env.build .. "/tbrt-memcpy")
          for k, list in pairs(ceil) do list[#list + 1] = figure(out, "memcpy_" .. k) end
        end
      end
      local v = table.remove(ceil[which])
      return v, not v and "tbrt-memcpy failed" or nil
    end
  end

  local P = env.pers
  r.memcpy_4m_hot = measure("memcpy 4 MiB hot (in-cache ceiling)", memcpy("4m_hot"))
  r.memcpy_128k_ring16 = measure("memcpy 128 KiB into a 16-slot ring", memcpy("128k_ring16"))
  r.c_copy64 = measure("tbrt soft C stream copies 64 KiB", stream(stream_c, "soft", P, "copy", 65536, 20000))
  r.c_view64 = measure("tbrt soft C stream views 64 KiB", stream(stream_c, "soft", P, "view", 65536, 20000))
  r.c_copy4m = measure("tbrt soft C stream copies 4 MiB", stream(stream_c, "soft", P, "copy", 4194304, 300))
  r.c_view4m = measure("tbrt soft C stream views 4 MiB", stream(stream_c, "soft", P, "view", 4194304, 300))
  r.lua_copy64 = measure("tbrt soft Lua stream copies 64 KiB", stream(stream_lua, "soft", P, "copy", 65536, 20000))
  r.lua_view64 = measure("tbrt soft Lua stream views 64 KiB", stream(stream_lua, "soft", P, "view", 65536, 20000))
  r.lua_copy4m = measure("tbrt soft Lua stream copies 4 MiB", stream(stream_lua, "soft", P, "copy", 4194304, 300))
  r.lua_view4m = measure("tbrt soft Lua stream views 4 MiB", stream(stream_lua, "soft", P, "view", 4194304, 300))
  r.tcp_copy4m = measure("tbrt tcp C stream copies 4 MiB", stream(stream_c, "tcp", nil, "copy", 4194304, 300))
  r.tcp_spin4m = measure("tbrt tcp C stream, spin 50 us, 4 MiB",
    stream(stream_c, "tcp", nil, "copy", 4194304, 300, "TBRT_BENCH_SPIN=50e-6 "))
  r.tcp_view4m = measure("tbrt tcp C stream views 4 MiB", stream(stream_c, "tcp", nil, "view", 4194304, 300))

  return {
    { "views / copies, 64 KiB stream (C)", r.c_view64, r.c_copy64, "copying path", ">=", 1.2 },
    { "views / copies, 4 MiB stream (C)", r.c_view4m, r.c_copy4m, "copying path", ">=", 1.2 },
    { "views 4 MiB stream, GB/s (C)", r.c_view4m, r.memcpy_4m_hot, "memcpy 4M hot", ">=", 0.6 },
    { "views 4 MiB stream, GB/s (C)", r.c_view4m, r.memcpy_128k_ring16, "memcpy ring16", nil },
    { "views / copies, 64 KiB stream (Lua)", r.lua_view64, r.lua_copy64, "copying path", ">=", 1.2 },
    { "views / copies, 4 MiB stream (Lua)", r.lua_view4m, r.lua_copy4m, "copying path", ">=", 1.2 },
    { "Lua / C, 4 MiB stream copies", r.lua_copy4m, r.c_copy4m, "C-driven", ">=", 0.9 },
    { "Lua / C, 4 MiB stream views", r.lua_view4m, r.c_view4m, "C-driven", ">=", 0.9 },
    { "tcp 4 MiB stream, GB/s (C)", r.tcp_copy4m, r.qperf_bw4m, "qperf tcp_bw", ">=", 0.9 },
    { "tcp 4 MiB stream, spin 50 us, GB/s (C)", r.tcp_spin4m, r.qperf_bw4m, "qperf tcp_bw", ">=", 0.9 },
    { "tcp 4 MiB stream through views, GB/s (C)", r.tcp_view4m, r.qperf_bw4m, "qperf tcp_bw", nil },
  }
end
