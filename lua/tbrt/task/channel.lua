-- tbrt/task/channel.lua - channels between tasks (task.channel); loaded by
-- tbrt.task, which passes itself in (the two need each other).
--
--   local ch = task.channel(8)        -- capacity 8; 0: every send waits for a recv
--   ch:send(v, timeout)  -> true, or nil, "ETIMEDOUT: ..." / "EPIPE: ..." (closed)
--   ch:recv(timeout)     -> v, or nil, "ETIMEDOUT: ..." / "EOF: ..." (closed and empty)
--   ch:close()           -> wakes every waiter; values already sent stay receivable
--
-- nil cannot be sent (it means "no value" in the returns). Waiting senders
-- and receivers are served in order. Outside a task only sends and receives
-- that need no wait, or a timeout of 0, are allowed.
return function(task)
  local park, wake = task.park, task.wake

  local Channel = {}
  Channel.__index = Channel
  task.Channel = Channel        -- so tools can tell a channel (help, pretty)

  local function remove(list, item)
    for i = 1, #list do
      if list[i] == item then table.remove(list, i) return end
    end
  end

  local function may_wait(op, timeout)
    if timeout ~= 0 and not task.current() then
      error(op .. ": would wait, and this is not inside a task (use a timeout of 0 to only try)", 3)
    end
  end

  local function check_timeout(op, timeout)
    if timeout ~= nil and (type(timeout) ~= "number" or timeout ~= timeout or timeout < 0) then
      error(op .. ": timeout must be nil (unbounded) or seconds >= 0, got " .. tostring(timeout), 3)
    end
  end

  local function push(self, v)
    self.tail = self.tail + 1
    self.buf[self.tail] = v
  end

  local function pop(self)
    local v = self.buf[self.head]
    self.buf[self.head] = nil
    self.head = self.head + 1
    if self.head > self.tail then self.head, self.tail = 1, 0 end
    return v
  end

  function Channel:count() return self.tail - self.head + 1 end

  function Channel:__tostring()
    return string.format("channel (%d/%d%s)", self:count(), self.capacity, self.closed and ", closed" or "")
  end

  function Channel:send(v, timeout)
    if getmetatable(self) ~= Channel then error("send: use ch:send(v, timeout)", 2) end
    if v == nil then error("channel send: nil cannot be sent (it means 'no value' to recv)", 2) end
    check_timeout("channel send", timeout)
    if self.closed then return nil, "EPIPE: channel send: the channel is closed" end
    local r = table.remove(self.receivers, 1)
    if r then
      wake(r, v)
      return true
    end
    if self:count() < self.capacity then
      push(self, v)
      return true
    end
    may_wait("channel send", timeout)
    return park("channel send", timeout, function(w)
      w.value = v
      self.senders[#self.senders + 1] = w
      return function() remove(self.senders, w) end
    end, function()
      return string.format("ETIMEDOUT: channel send: no room within %g s", timeout)
    end)
  end

  function Channel:recv(timeout)
    if getmetatable(self) ~= Channel then error("recv: use ch:recv(timeout)", 2) end
    check_timeout("channel recv", timeout)
    if self:count() > 0 then
      local v = pop(self)
      local s = table.remove(self.senders, 1)   -- room now: the next sender's value moves in
      if s then
        push(self, s.value)
        wake(s, true)
      end
      return v
    end
    local s = table.remove(self.senders, 1)     -- capacity 0: take it from the sender
    if s then
      wake(s, true)
      return s.value
    end
    if self.closed then return nil, "EOF: channel recv: the channel is closed" end
    may_wait("channel recv", timeout)
    return park("channel recv", timeout, function(w)
      self.receivers[#self.receivers + 1] = w
      return function() remove(self.receivers, w) end
    end, function()
      return string.format("ETIMEDOUT: channel recv: nothing within %g s", timeout)
    end)
  end

  -- Close: receivers waiting get EOF, senders waiting get EPIPE; later
  -- sends fail, later receives drain what is buffered, then get EOF.
  -- False if it was closed already.
  function Channel:close()
    if self.closed then return false end
    self.closed = true
    local receivers, senders = self.receivers, self.senders
    self.receivers, self.senders = {}, {}
    for _, w in ipairs(receivers) do wake(w, nil, "EOF: channel recv: the channel was closed") end
    for _, w in ipairs(senders) do wake(w, nil, "EPIPE: channel send: the channel was closed") end
    return true
  end

  return function(capacity)
    capacity = capacity or 0
    if type(capacity) ~= "number" or capacity < 0 or capacity % 1 ~= 0 then
      error("task.channel: capacity must be an integer >= 0, got " .. tostring(capacity), 2)
    end
    return setmetatable({ capacity = capacity, buf = {}, head = 1, tail = 0,
      senders = {}, receivers = {}, closed = false }, Channel)
  end
end
