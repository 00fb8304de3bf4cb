-- soft_ends.lua - spec helpers for soft-device queue pairs that live in
-- processes of their own (spec/support/soft_end.lua), so a spec can break
-- one process's shared memory and check what the other one does: it must
-- report an error and live on.
--
--   local E = require("soft_ends")
--   local a, b = E.pair{ personality = "linux-rc", type = "RC" }  -- connected
--   b:call{ op = "post_recv", len = 64 }
--   E.scribble(b, "qp.rq_cap", 0)            -- build/test/soft-scribble
--   a:call{ op = "post_send", len = 64 }
--   local r = a:call{ op = "poll", n = 1 }    -- r.wcs[1].status, .why
--   E.close(a, b)                             -- asserts both are still alive
-- Every call is bounded; an end that died or went silent fails the call
-- with its exit status and stderr.
local cjson = require("cjson")
local uv = require("luv")
local task = require("tbrt.task")
local H = require("helpers")

local E = {}
E.SCRIBBLE = H.build .. "/test/soft-scribble"

local End = {}
End.__index = End

-- Start one end (not yet opened); ns: inside that network namespace.
function E.spawn(env, ns)
  local inp, out, err = uv.new_pipe(false), uv.new_pipe(false), uv.new_pipe(false)
  local self = setmetatable({ lines = {}, partial = "", ebufs = {}, open = 3 }, End)
  local envl = {}
  for k, v in pairs(uv.os_environ()) do envl[#envl + 1] = k .. "=" .. v end
  for k, v in pairs(env or {}) do envl[#envl + 1] = k .. "=" .. v end
  local file, args = H.tbrt, { H.root .. "/spec/support/soft_end.lua" }
  if ns then file, args = "/usr/sbin/ip", { "netns", "exec", ns, H.tbrt, args[1] } end
  local proc, pid = uv.spawn(file, { args = args,
    stdio = { inp, out, err }, env = envl }, function(code, signal)
    self.code, self.signal = code, signal
    self.open = self.open - 1
  end)
  assert(proc, pid)
  self.proc, self.pid, self.inp = proc, pid, inp
  out:read_start(function(_, data)
    if not data then out:close() self.open = self.open - 1 return end
    self.partial = self.partial .. data
    for l in self.partial:gmatch("([^\n]*)\n") do self.lines[#self.lines + 1] = l end
    self.partial = self.partial:match("[^\n]*$")
  end)
  err:read_start(function(_, data)
    if not data then err:close() self.open = self.open - 1 return end
    self.ebufs[#self.ebufs + 1] = data
  end)
  return self
end

function End:why_dead()
  return string.format("end pid %d: exit code %s, signal %s, stderr:\n%s", self.pid,
    tostring(self.code), tostring(self.signal), table.concat(self.ebufs))
end

function End:alive() return self.code == nil end

-- Send one request, wait (bounded) for its reply.
function End:call(req, timeout)
  assert(self:alive(), self:why_dead())
  local n = #self.lines
  self.inp:write(cjson.encode(req) .. "\n")
  local ok = task.wait(function() return #self.lines > n or not self:alive() end,
    timeout or H.RUN_TIMEOUT)
  if #self.lines > n then return cjson.decode(table.remove(self.lines, n + 1)) end
  if not ok then error("end pid " .. self.pid .. ": no reply to " .. req.op .. " in time", 2) end
  task.wait(function() return self.open == 0 end, 2)
  error(self:why_dead(), 2)
end

-- Ask, and fail the spec on an error reply.
function End:must(req, timeout)
  local r = self:call(req, timeout)
  assert(not r.err, req.op .. ": " .. tostring(r.err))
  return r
end

function End:stop()
  self.stopped = true
  if self:alive() then
    self.inp:write('{"op":"exit"}\n')
    task.wait(function() return not self:alive() end, 5)
    if self:alive() then self.proc:kill("sigkill") end
  end
  task.wait(function() return self.open == 0 end, 5)
  if not self.inp:is_closing() then self.inp:close() end
  if not self.proc:is_closing() then self.proc:close() end
end

-- Two ends, opened with o (personality, type, depth) and, unless o.connect
-- is false, connected to each other.
-- Across namespaces: o.ns = { nsA, nsB } and o.addr = { addrA, addrB }
-- (each end's IPv4 address there), o.wire.
function E.pair(o)
  local ns, addr = o.ns or {}, o.addr or {}
  local a, b = E.spawn(o.env, ns[1]), E.spawn(o.env, ns[2])
  a.addr, b.addr = addr[1], addr[2]
  for _, x in ipairs { a, b } do
    local r = x:must{ op = "open", personality = o.personality, type = o.type, depth = o.depth,
      addr = x.addr, wire = o.wire, mr_len = o.mr_len, send_access = o.send_access }
    x.qpn, x.qp_pid, x.send_key, x.recv_key = r.qpn, r.pid, r.send_key, r.recv_key
    x.recv_addr, x.send_addr = r.recv_addr, r.send_addr
    x.personality = o.personality
  end
  if o.connect ~= false and o.type ~= "UD" then
    for _, p in ipairs { { a, b }, { b, a } } do
      p[1]:must{ op = "connect", qpn = p[2].qpn, timeout = o.timeout, retry_cnt = o.retry_cnt,
        min_rnr_timer = o.min_rnr_timer, rnr_retry = o.rnr_retry, peer_addr = p[2].addr }
    end
  end
  return a, b
end

-- Check that every end still answers (but those stopped on purpose), then
-- stop them all.
function E.close(...)
  local ends = { ... }
  local dead
  for _, x in ipairs(ends) do
    local ok, r = true, { pong = true }
    if not x.stopped then ok, r = pcall(x.call, x, { op = "ping" }, 5) end
    if not (ok and r.pong) then dead = dead or (ok and cjson.encode(r) or r) end
  end
  for _, x in ipairs(ends) do x:stop() end
  assert(not dead, dead)
end

-- Write VALUE into FIELD of the shared memory of end x's queue pair, from a
-- process of its own (build/test/soft-scribble maps x's context as a peer
-- does). In FIELD, RKEY and SKEY stand for x's receive and send MR keys.
-- Returns the scribbler's output.
function E.scribble(x, field, value)
  field = field:gsub("RKEY", tostring(x.recv_key)):gsub("SKEY", tostring(x.send_key))
  local r = H.run(E.SCRIBBLE, { "--personality", x.personality, tostring(x.qpn), field,
    tostring(value) })
  assert(r.code == 0, "soft-scribble " .. field .. ": " .. H.describe(r))
  return r.stdout
end

return E
