-- tbrt/task/poll.lua - task.poll: wait until an fd is readable or writable, on
-- the shared loop. Loaded by tbrt.task, which passes itself in.
--
--   task.poll(fd, "r" | "w" | "rw", timeout) -> events ("r", "w", "rw"), or nil, err
--   task.poll_close(fd)                      -> before closing fd (see below)
--
-- One uv_poll handle per fd, kept between waits and started only while a
-- task waits on it (with the union of what the waiters want), so a quiet fd
-- neither costs a callback nor keeps the loop alive. libuv makes the fd
-- non-blocking and refuses regular files (EPERM). The completion fd and the
-- bootstrap socket of the core are waited on this way.
--
-- Call task.poll_close(fd) before closing an fd that was polled: it closes
-- the handle (waiters get "ECANCELED: ...") so the fd number can be reused.
return function(task)
  local uv = require("luv")
  local park, wake = task.park, task.wake

  local polls = {}    -- fd -> { handle, waiters = { [w] = "r" | "w" | "rw" }, mask }

  -- The tbrt program's own poll handles (bindings/host/fdpoll.c) keep quiet
  -- about POLLERR, which luv prints; plain luajit falls back to luv's.
  local has_fdpoll, fdpoll = pcall(require, "tbrt.fdpoll")
  local new_poll = has_fdpoll and fdpoll.new or uv.new_poll

  local function wanted_mask(p)
    local r, w = false, false
    for _, ev in pairs(p.waiters) do
      if ev:find("r", 1, true) then r = true end
      if ev:find("w", 1, true) then w = true end
    end
    return (r and "r" or "") .. (w and "w" or "")
  end

  local function update(p)
    local mask = wanted_mask(p)
    if mask == p.mask or p.closed then return end
    if mask == "" then
      p.handle:stop()
    else
      p.handle:start(mask, p.on_events)
    end
    p.mask = mask
  end

  local function matches(events, want)
    return (want:find("r", 1, true) and events:find("r", 1, true)) or
      (want:find("w", 1, true) and events:find("w", 1, true))
  end

  -- The handle's callback, made apart from poll_of: a function that makes a
  -- closure cannot be compiled past its returns (LuaJIT: UCLO), and poll_of
  -- is on every wait's path.
  local function on_events_of(p)
    local fd = p.fd
    return function(e, events)
      for w, want in pairs(p.waiters) do       -- wake() removes w: allowed while iterating
        if e then
          wake(w, nil, string.format("%s: task.poll: fd %d failed", e, fd))
        elseif events and matches(events, want) then
          -- report only what this waiter asked for
          local r = want:find("r", 1, true) and events:find("r", 1, true) and "r" or ""
          local wr = want:find("w", 1, true) and events:find("w", 1, true) and "w" or ""
          wake(w, r .. wr)
        end
      end
    end
  end

  local function poll_of(fd)
    local p = polls[fd]
    if p then return p end
    local handle, err = new_poll(fd)
    if not handle then return nil, err end
    p = { fd = fd, handle = handle, waiters = {}, mask = "" }
    p.on_events = on_events_of(p)
    polls[fd] = p
    return p
  end

  local function poll(fd, events, timeout)
    if type(fd) ~= "number" or fd < 0 or fd % 1 ~= 0 then
      error("task.poll: fd must be an integer >= 0, got " .. tostring(fd), 2)
    end
    if events ~= "r" and events ~= "w" and events ~= "rw" then
      error("task.poll: events must be \"r\", \"w\" or \"rw\", got " .. tostring(events), 2)
    end
    if not task.current() then error("task.poll: not inside a task (use task.spawn or task.run)", 2) end
    local p, err = poll_of(fd)
    if not p then return nil, string.format("%s (task.poll fd %d)", err, fd) end
    return park("task.poll", timeout, function(w)
      p.waiters[w] = events
      update(p)
      return function()
        p.waiters[w] = nil
        update(p)
      end
    end, function()
      return string.format("ETIMEDOUT: task.poll: fd %d not ready for %q within %g s", fd, events, timeout)
    end)
  end

  local function poll_close(fd)
    local p = polls[fd]
    if not p then return false end
    polls[fd] = nil
    local waiters = {}
    for w in pairs(p.waiters) do waiters[#waiters + 1] = w end
    p.closed = true
    for _, w in ipairs(waiters) do
      wake(w, nil, string.format("ECANCELED: task.poll: fd %d was closed", fd))
    end
    if not p.handle:is_closing() then p.handle:close() end
    return true
  end

  return poll, poll_close
end
