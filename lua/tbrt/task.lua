-- tbrt/task.lua - tasks: coroutines scheduled on the one libuv loop (luv).
--
-- A task runs until it waits (sleep, join, a channel, poll, wait); the wait
-- parks its coroutine and a loop event (a timer, an fd, another task) wakes
-- it, so nothing here ever blocks the loop.
--
--   local task = require("tbrt.task")
--   local t = task.spawn(function(a) task.sleep(0.1) return a * 2 end, 21)
--   print(t:join(1))                                  --> 42
--
-- Conventions (luv's): a wait returns its values, or nil, "EWHAT: message"
-- (ETIMEDOUT, ECANCELED, EOF, EPIPE, ETASK, or luv's own); misuse -- a bad
-- argument, waiting outside a task, a task joining itself -- raises. Every
-- wait takes a timeout in seconds: a number bounds it (0: do not wait at
-- all), nil (or leaving it out) makes the wait unbounded.
--
-- Scheduling: spawn never runs the function before it returns; the task
-- starts at the scheduler's next turn. Wakeups go through a ready queue,
-- drained before the loop polls for I/O (prepare) and right after (check),
-- so a task woken by an fd runs in the same loop iteration; an idle handle
-- runs while the queue is not empty, which keeps the loop from blocking or
-- exiting with work pending. A wakeup that comes before the task has parked
-- is kept in its wait record, never lost.
--
-- Errors: a task's error goes to whoever joins it (join, all, run,
-- with_timeout). A failed task that nobody has joined by the next scheduler
-- turn goes to the on_error hook; the default hook prints "tbrt: task N
-- failed: <message>" and the traceback to stderr and exits 1.
--
-- Task states (t:status()); done, failed and canceled are final:
--   ready   -> running                  the scheduler resumes it
--   running -> waiting                  it parks in a wait
--   running -> ready                    sleep(0): it requeues itself
--   waiting -> ready                    the wait fired (event, timeout, cancel)
--   running -> done | failed | canceled the function returned or raised
--   ready   -> canceled                 canceled before it ever ran
-- A task never goes from waiting to running without passing the queue, and
-- nothing but the scheduler resumes its coroutine (a bare coroutine.yield in
-- a task is misuse and fails the task).
local uv = require("luv")

local M = {}

local unpack = unpack or table.unpack
local function pack(...) return { n = select("#", ...), ... } end

local PARK = {}                 -- what a parked task yields to the scheduler
local CANCELED = { n = 0 }      -- wait result: canceled while waiting
local NO_RESULTS = { n = 0 }

local Task = {}
Task.__index = Task
M.Task = Task

local by_co = setmetatable({}, { __mode = "k" })   -- coroutine -> task
local next_id = 1
local queue, q_head, q_tail = {}, 1, 0              -- tasks and functions, FIFO
local idle, prepare, check                          -- created on first use
local idle_on = false
local conds = {}                                    -- wait record -> condition (task.wait)
local on_error_hook

local function is_final(state) return state == "done" or state == "failed" or state == "canceled" end

local function secs(s) return string.format("%g s", s) end

local function check_timeout(op, timeout, level)
  if timeout ~= nil and (type(timeout) ~= "number" or timeout ~= timeout or timeout < 0) then
    error(string.format("%s: timeout must be nil (unbounded) or seconds >= 0, got %s",
      op, tostring(timeout)), (level or 2) + 1)
  end
  if timeout == math.huge then return nil end
  return timeout
end

local function check_task(t, op)
  if getmetatable(t) ~= Task then
    error(op .. ": expected a task (use t:" .. op .. "(...)), got " .. type(t), 3)
  end
end

function M.current()
  local co = coroutine.running()
  return co and by_co[co] or nil
end

-- The running task, or a misuse error naming the operation.
local function running(op)
  local t = M.current()
  if not t then
    error(op .. ": not inside a task (waiting needs one: use task.spawn or task.run)", 3)
  end
  return t
end

---------------------------------------------------------------------------
-- The ready queue.

local drain, check_conds

-- (no closures made in here: LuaJIT cannot compile a return past the
-- upvalues they would close, and this is on every wake-up's path)
local function turn() drain() check_conds() end

local function ensure_handles()
  if idle then return end
  idle = assert(uv.new_idle())
  prepare = assert(uv.new_prepare())
  check = assert(uv.new_check())
  prepare:start(turn)
  check:start(turn)
  -- prepare and check only watch; what keeps the loop alive is real work
  -- (the idle handle while the queue is not empty, timers, fds).
  prepare:unref()
  check:unref()
end

-- one callback for every start of the idle handle: no closure per wake-up
local function on_idle() drain() end

local function schedule(item)
  q_tail = q_tail + 1
  queue[q_tail] = item
  if not idle_on then
    ensure_handles()
    idle:start(on_idle)
    idle_on = true
  end
end

-- One scheduler turn: run what was queued when it started (what those
-- queue in turn waits for the next turn, so sleep(0) cannot starve the
-- loop). An error escaping a queued function leaves the rest queued.
local step

function drain()
  local last = q_tail
  while q_head <= last do
    local item = queue[q_head]
    queue[q_head] = nil
    q_head = q_head + 1
    if type(item) == "function" then item() else step(item) end
  end
  if q_head > q_tail then
    q_head, q_tail = 1, 0
    if idle_on then idle:stop(); idle_on = false end
  end
end

-- Whether something else waits in the ready queue (a task or a callback):
-- a task busy-polling a device should let it run rather than spin.
function M.others_ready() return q_head <= q_tail end

---------------------------------------------------------------------------
-- Waiting: a task parks with a wait record w; wake(w, ...) fires it once,
-- from a callback, another task or a timer, and the wait returns those
-- values when the task runs again.

local function raise_canceled(t)
  local msg = string.format("ECANCELED: task %d canceled: %s", t.id, t.cancel_reason)
  t.cancel_reason = nil
  t.cancel_error = msg
  error(msg, 0)
end

local function fire(w, result)
  if w.fired then return false end
  w.fired = true
  w.result = result
  local t = w.task
  if w.timing then t.timer:stop() end
  if w.disarm then w.disarm() end
  if t.state == "waiting" then
    t.state = "ready"
    schedule(t)
  end
  return true
end

-- Fire a wait record: the wait returns these values. False if it had fired
-- already (timed out, canceled, woken by someone else).
function M.wake(w, ...)
  return fire(w, pack(...))
end
local wake = M.wake

local function timeout_text(msg) if type(msg) == "function" then return msg() end return msg end

local function start_timer(t, w, timeout, msg)
  local timer = t.timer
  if not timer then
    timer = assert(uv.new_timer())
    t.timer = timer
  end
  uv.update_time()      -- the loop's clock is from the start of this iteration
  w.timing = true
  timer:start(math.ceil(timeout * 1000), 0, function() wake(w, nil, timeout_text(msg)) end)
end

-- Park the running task until its wait fires. arm(w) registers w wherever
-- the wakeup comes from and returns a function that unregisters it (called
-- once w fires), or nil. After `timeout` seconds the wait returns nil,
-- timeout_msg (a string, or a function making one); nil: no bound. If the
-- task is canceled, the wait raises "ECANCELED: ...". This is the building
-- block for new kinds of waits (links use it for their own sources).
-- Outside a task only timeout 0 is allowed: it returns nil, timeout_msg
-- at once.
function M.park(op, timeout, arm, timeout_msg)
  timeout = check_timeout(op, timeout)
  local t = M.current()
  if not t then
    if timeout == 0 then return nil, timeout_text(timeout_msg) end
    running(op)
  end
  if t.cancel_reason then raise_canceled(t) end
  local w = { task = t, op = op, fired = false }
  t.wait = w
  if arm then
    w.disarm = arm(w)
    if w.fired and w.disarm then w.disarm() end
  end
  if not w.fired and timeout then
    if timeout == 0 then
      wake(w, nil, timeout_text(timeout_msg))
    else
      start_timer(t, w, timeout, timeout_msg)
    end
  end
  if not w.fired then
    t.state = "waiting"
    coroutine.yield(PARK)
  end
  t.wait = nil
  local r = w.result
  if r == CANCELED then raise_canceled(t) end
  if r.raise ~= nil then error(r.raise, 0) end
  return unpack(r, 1, r.n)
end
local park = M.park

---------------------------------------------------------------------------
-- Tasks.

local function outcome_error(t)
  if t.state == "canceled" then return tostring(t.error) end
  return string.format("ETASK: task %d: %s\n%s", t.id, tostring(t.error), t.traceback or "")
end

local function outcome(t)
  if t.state == "done" then return unpack(t.results, 1, t.results.n) end
  return nil, outcome_error(t)
end

local function finish(t, state, value)
  t.state = state
  if state == "done" then t.results = value else t.error = value end
  t.wait = nil
  if t.timer then t.timer:close(); t.timer = nil end
  local watchers = t.watchers
  t.watchers = nil
  if watchers then
    for fn in pairs(watchers) do fn(t) end
  end
  if state == "failed" and not t.joined then
    schedule(function()
      if not t.joined then on_error_hook(t, outcome_error(t)) end
    end)
  end
end

-- The traceback of where a task's error was raised, without the bottom
-- frames (body() and its xpcall), which are the scheduler's, not the task's.
local THIS_FILE = debug.getinfo(1, "S").short_src
local SCHEDULER_FRAMES = "\n%s*%[C%]: in function 'xpcall'\n%s*" ..
  THIS_FILE:gsub("%p", "%%%0") .. ":%d+: in function <[^\n]*>$"

function M.traceback(level)
  local tb = debug.traceback("", (level or 1) + 1):gsub("^\n", "")
  return (tb:gsub(SCHEDULER_FRAMES, ""))
end

local function body(t, fn, args)
  local function handler(e)
    t.traceback = M.traceback(2)
    return e
  end
  local r = pack(xpcall(fn, handler, unpack(args, 1, args.n)))
  if r[1] then
    finish(t, "done", r.n == 1 and NO_RESULTS or { n = r.n - 1, unpack(r, 2, r.n) })
  elseif t.cancel_error ~= nil and r[2] == t.cancel_error then
    finish(t, "canceled", r[2])
  else
    finish(t, "failed", r[2])
  end
end

function step(t)
  if t.state ~= "ready" then return end     -- canceled before it ran
  t.state = "running"
  t.started = true
  local ok, yielded = coroutine.resume(t.co)
  if coroutine.status(t.co) == "dead" then
    if not ok then    -- body() itself failed: a bug here, not in the task
      t.traceback = debug.traceback(t.co)
      finish(t, "failed", "task scheduler: " .. tostring(yielded))
    end
    by_co[t.co] = nil
    t.co = nil
  elseif yielded ~= PARK then
    by_co[t.co] = nil
    t.co = nil
    t.traceback = ""
    finish(t, "failed", string.format("task %d: coroutine.yield called directly in a task " ..
      "(wait with the task API: sleep, join, channels, poll)", t.id))
  end
end

-- Run fn(...) as a new task; it starts at the next scheduler turn.
function M.spawn(fn, ...)
  if type(fn) ~= "function" then
    local mt = getmetatable(fn)
    if not (mt and mt.__call) then
      error("task.spawn: expected a function, got " .. type(fn), 2)
    end
  end
  local t = setmetatable({ id = next_id, state = "ready" }, Task)
  next_id = next_id + 1
  local args = pack(...)
  t.co = coroutine.create(function() return body(t, fn, args) end)
  by_co[t.co] = t
  schedule(t)
  return t
end

function Task:status()
  check_task(self, "status")
  return self.state
end

function Task:__tostring()
  return string.format("task %d (%s)", self.id, self.state)
end

-- Call fn(t) once t has finished (right away if it has). Internal to the
-- waits below; does not count as joining.
local function watch(t, fn)
  if is_final(t.state) then fn(t) return function() end end
  t.watchers = t.watchers or {}
  t.watchers[fn] = true
  return function() if t.watchers then t.watchers[fn] = nil end end
end

-- The task's return values, or nil, err: "ETIMEDOUT: join: ...",
-- "ETASK: task N: <message>\n<traceback>", "ECANCELED: task N canceled: ...".
-- Outside a task only a finished task, or timeout 0, can be joined.
function Task:join(timeout)
  check_task(self, "join")
  timeout = check_timeout("join", timeout)
  self.joined = true
  if is_final(self.state) then return outcome(self) end
  local function timed_out()
    return string.format("ETIMEDOUT: join: task %d did not finish within %s", self.id, secs(timeout))
  end
  local me = M.current()
  if me == self then error(string.format("join: task %d cannot join itself", self.id), 2) end
  if not me then
    if timeout == 0 then return nil, timed_out() end
    error(string.format("join: task %d has not finished and this is not inside a task " ..
      "(use task.run, or join(0) to only look)", self.id), 2)
  end
  local ok, err = park("join", timeout, function(w)
    return watch(self, function() wake(w, true) end)
  end, timed_out)
  if ok then return outcome(self) end
  return nil, err
end

-- Make the task's current wait, or its next one, raise "ECANCELED: task N
-- canceled: <reason>" inside it. A task that has not started yet never
-- runs. False if the task had already finished.
function Task:cancel(reason)
  check_task(self, "cancel")
  if is_final(self.state) then return false end
  reason = reason == nil and "canceled" or tostring(reason)
  if not self.started then
    by_co[self.co] = nil
    self.co = nil
    finish(self, "canceled", string.format("ECANCELED: task %d canceled: %s", self.id, reason))
    return true
  end
  self.cancel_reason = reason
  if self.wait then fire(self.wait, CANCELED) end
  return true
end

-- Sleep s seconds; sleep(0) lets every other ready task run first.
function M.sleep(s)
  if type(s) ~= "number" or s ~= s or s < 0 then
    error("task.sleep: expected seconds >= 0, got " .. tostring(s), 2)
  end
  local t = running("task.sleep")
  if s > 0 then
    park("task.sleep", s, nil, "")
    return true
  end
  if t.cancel_reason then raise_canceled(t) end
  t.wait = { task = t, op = "task.sleep", fired = true, result = NO_RESULTS }
  t.state = "ready"
  schedule(t)
  coroutine.yield(PARK)
  t.wait = nil
  return true
end

-- Wait for every task in list (functions in it are spawned first). Returns
-- the list of each task's first return value, or nil, err as soon as one
-- fails (its join error; the tasks all() spawned are canceled then) or the
-- timeout passes ("ETIMEDOUT: all: ...").
function M.all(list, timeout)
  if type(list) ~= "table" then error("task.all: expected a list of tasks or functions", 2) end
  timeout = check_timeout("task.all", timeout)
  local tasks, own = {}, {}
  for i, x in ipairs(list) do
    if getmetatable(x) == Task then
      tasks[i] = x
    elseif type(x) == "function" then
      tasks[i] = M.spawn(x)
      own[#own + 1] = tasks[i]
    else
      error(string.format("task.all: item %d is a %s, not a task or a function", i, type(x)), 2)
    end
    tasks[i].joined = true
  end
  local function failed()
    for _, t in ipairs(tasks) do
      if t.state == "failed" or t.state == "canceled" then return t end
    end
  end
  local function pending()
    local n = 0
    for _, t in ipairs(tasks) do if not is_final(t.state) then n = n + 1 end end
    return n
  end
  local bad = failed()
  if not bad and pending() > 0 then
    if not M.current() and timeout ~= 0 then
      error("task.all: not inside a task (use task.run, or a timeout of 0 to only look)", 2)
    end
    local ok, err = park("task.all", timeout, function(w)
      local stops = {}
      local function on_finish(t)
        if t.state ~= "done" or pending() == 0 then wake(w, true) end
      end
      for i, t in ipairs(tasks) do stops[i] = watch(t, on_finish) end
      return function() for _, stop in ipairs(stops) do stop() end end
    end, function()
      return string.format("ETIMEDOUT: task.all: %d of %d tasks did not finish within %s",
        pending(), #tasks, secs(timeout))
    end)
    if not ok then
      for _, t in ipairs(own) do t:cancel("task.all gave up") end
      return nil, err
    end
    bad = failed()
  end
  if bad then
    for _, t in ipairs(own) do t:cancel("task.all: another task failed") end
    return nil, outcome_error(bad)
  end
  local results = {}
  for i, t in ipairs(tasks) do results[i] = t.results[1] end
  return results
end

-- fn(...) in a new task, bounded: its results, or nil, "ETIMEDOUT: ..."
-- (the task is canceled then). Its error is raised here, with its
-- traceback; canceling the caller cancels it too.
function M.with_timeout(s, fn, ...)
  if type(s) ~= "number" or s ~= s or s < 0 then
    error("task.with_timeout: expected seconds >= 0, got " .. tostring(s), 2)
  end
  running("task.with_timeout")
  local t = M.spawn(fn, ...)
  local r = pack(pcall(t.join, t, s))
  if not r[1] then
    t:cancel("the task waiting in with_timeout was canceled")
    error(r[2], 0)
  end
  if t.state == "done" then return unpack(r, 2, r.n) end
  if t.state == "failed" then error(outcome_error(t), 0) end
  t:cancel(string.format("with_timeout: did not finish within %s", secs(s)))
  return nil, string.format("ETIMEDOUT: with_timeout: task %d did not finish within %s", t.id, secs(s))
end

-- Run fn(...) as a task until it finishes and return its results, or raise
-- its error. Inside a task this is spawn + join; outside (plain luajit,
-- specs) it runs the loop itself, which must not be running already.
function M.run(fn, ...)
  local t = M.spawn(fn, ...)
  t.joined = true
  if M.current() then
    t:join(nil)
  else
    if uv.loop_mode() ~= nil then
      t:cancel("task.run called from a loop callback")
      error("task.run: called from a loop callback (the loop is running); use task.spawn", 2)
    end
    while not is_final(t.state) do
      local alive = uv.run("once")
      if not alive and q_head > q_tail and not is_final(t.state) then
        local op = t.wait and t.wait.op or "?"
        t:cancel("deadlock")
        error(string.format("EDEADLK: task.run: task %d waits in %s but nothing on the loop " ..
          "can wake it", t.id, op), 2)
      end
    end
  end
  if t.state == "done" then return unpack(t.results, 1, t.results.n) end
  local e = t.error
  if type(e) == "string" and t.state == "failed" then e = e .. "\n" .. (t.traceback or "") end
  error(e, 0)
end

-- Wait until cond() returns a true value (returned). cond is checked after
-- every scheduler turn and loop iteration, so it must be cheap; it is
-- meant for conditions changed by tasks and callbacks on this loop. An
-- error in cond is raised in the waiting task.
function M.wait(cond, timeout)
  if type(cond) ~= "function" then error("task.wait: expected a function", 2) end
  timeout = check_timeout("task.wait", timeout)
  local v = cond()
  if v then return v end
  return park("task.wait", timeout, function(w)
    ensure_handles()
    conds[w] = cond
    return function() conds[w] = nil end
  end, function() return "ETIMEDOUT: task.wait: condition still false after " .. secs(timeout) end)
end

function check_conds()
  if next(conds) == nil then return end
  for w, cond in pairs(conds) do
    local ok, v = pcall(cond)
    if not ok then
      fire(w, { n = 0, raise = v })
    elseif v then
      wake(w, v)
    end
  end
end

-- Set the hook for failed tasks nobody joined: fn(t, err) with err as
-- join would return it (t.error and t.traceback hold the parts). Returns
-- the previous hook; nil restores the default.
function M.on_error(fn)
  if fn ~= nil and type(fn) ~= "function" then error("task.on_error: expected a function", 2) end
  local prev = on_error_hook
  on_error_hook = fn or M.default_on_error
  return prev
end

function M.default_on_error(t)
  io.stdout:flush()
  io.stderr:write(string.format("tbrt: task %d failed: %s\n%s\n", t.id, tostring(t.error),
    t.traceback or ""))
  io.stderr:flush()
  os.exit(1)
end
on_error_hook = M.default_on_error

M.channel = require("tbrt.task.channel")(M)
M.poll, M.poll_close = require("tbrt.task.poll")(M)

return M
