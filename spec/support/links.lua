-- links.lua - spec helpers for links: run a spec body as a task, make a
-- connected pair of links in this process, patterned buffers, and a peer
-- link in a child tbrt process (spec/support/peer.lua).
local ffi = require("ffi")
local uv = require("luv")
local tbrt = require("tbrt")
local task = require("tbrt.task")
local H = require("helpers")

local L = {}

-- it("...", L.async(function() ... end)): the body runs as a task.
function L.async(fn)
  return function(...) return task.run(fn, ...) end
end

-- Two connected links in this process; opts_b defaults to opts_a.
function L.pair(opts_a, opts_b)
  local srv = assert(tbrt.listen("127.0.0.1", 0, opts_b or opts_a))
  local t = task.spawn(function() return srv:accept(10) end)
  local a, aerr = tbrt.connect("127.0.0.1", srv.port, opts_a)
  local b, berr = t:join(10)
  srv:close()
  return a, b, aerr, berr
end

-- A buffer of n bytes, byte i = (i * 131 + seed) % 251.
function L.pattern(n, seed)
  local buf = ffi.new("uint8_t[?]", math.max(n, 1))
  seed = seed or 7
  for i = 0, n - 1 do buf[i] = (i * 131 + seed) % 251 end
  return buf
end

-- Index of the first byte that differs from the pattern, or nil.
function L.check(buf, n, seed)
  seed = seed or 7
  for i = 0, n - 1 do
    if buf[i] ~= (i * 131 + seed) % 251 then return i end
  end
  return nil
end

-- Start `tbrt spec/support/peer.lua args...` (or another script: a name in
-- spec/support/ or an absolute path) (not waited for). Returns a handle
-- with :wait(timeout) -> { code, signal, stdout, stderr } and :kill(sig).
function L.spawn_peer(args, env, script)
  script = script or "peer.lua"
  local full = { script:sub(1, 1) == "/" and script or (H.root .. "/spec/support/" .. script) }
  for _, a in ipairs(args) do full[#full + 1] = tostring(a) end
  return L.spawn(H.tbrt, full, env)
end

-- Start any program with args (not waited for); the same handle as spawn_peer.
function L.spawn(program, args, env)
  local out, err = uv.new_pipe(false), uv.new_pipe(false)
  local bufs, ebufs = {}, {}
  local h = { done = false }
  local full = {}
  for _, a in ipairs(args) do full[#full + 1] = tostring(a) end
  local map, envl = uv.os_environ(), {}
  for k, v in pairs(env or {}) do map[k] = v or nil end    -- false removes
  for k, v in pairs(map) do envl[#envl + 1] = k .. "=" .. v end
  local open = 3
  local proc, pid = uv.spawn(program, { args = full, stdio = { nil, out, err }, env = envl },
    function(code, signal)
      h.code, h.signal = code, signal
      open = open - 1
    end)
  assert(proc, pid)
  h.proc, h.pid = proc, pid
  local function reader(list, pipe)
    return function(e, data)
      if data then list[#list + 1] = data else pipe:close() open = open - 1 end
    end
  end
  out:read_start(reader(bufs, out))
  err:read_start(reader(ebufs, err))
  function h:stdout() return table.concat(bufs) end
  function h:wait(timeout)
    local ok = task.wait(function() return open == 0 end, timeout or H.RUN_TIMEOUT)
    if not ok then
      proc:kill("sigkill")
      task.wait(function() return open == 0 end, 5)
    end
    if not proc:is_closing() then proc:close() end
    return { code = h.code, signal = h.signal, stdout = table.concat(bufs),
      stderr = table.concat(ebufs), timed_out = not ok }
  end
  function h:kill(sig) proc:kill(sig or "sigkill") end
  -- wait until the peer printed a line containing `text`
  function h:expect(text, timeout)
    return task.wait(function() return table.concat(bufs):find(text, 1, true) ~= nil end,
      timeout or H.RUN_TIMEOUT)
  end
  return h
end

return L
