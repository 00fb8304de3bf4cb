-- tbrt/matrix/progress.lua - the live progress of a run: cells done of
-- total, the current cell, elapsed time, ETA (from the mean time of the
-- cells done so far) and failures so far.
--   on a terminal: one bar, redrawn in place (CR + erase line) at each
--                  change and every second; notes print above it
--   otherwise:     plain lines, one when a cell starts and one when it ends
local uv = require("luv")

local M = {}

local P = {}
P.__index = P

local function clock(s)
  if not s then return "?" end
  s = math.floor(s + 0.5)
  local h, m, sec = math.floor(s / 3600), math.floor(s % 3600 / 60), s % 60
  if h > 0 then return string.format("%d:%02d:%02d", h, m, sec) end
  return string.format("%d:%02d", m, sec)
end
M.clock = clock

-- opts: total, tty (default: is stdout a terminal), out (a file), width
function M.new(opts)
  local self = setmetatable({ total = opts.total, done = 0, failed = 0, t0 = uv.hrtime() / 1e9,
    out = opts.out or io.stdout, width = opts.width }, P)
  if opts.tty == nil then self.tty = uv.guess_handle(1) == "tty" else self.tty = opts.tty end
  if self.tty and not self.width then
    local cols = tonumber(os.getenv("COLUMNS") or "")
    if not cols then
      local t = uv.new_tty(1, false)
      if t then
        local w = t:get_winsize()
        cols = type(w) == "number" and w or nil
        t:close()
      end
    end
    self.width = cols or 80
  end
  if self.tty then
    self.timer = uv.new_timer()
    self.timer:start(1000, 1000, function() self:_draw() end)
    self.timer:unref()
  end
  return self
end

function P:elapsed() return uv.hrtime() / 1e9 - self.t0 end

function P:eta()
  if self.done == 0 then return nil end
  return self:elapsed() / self.done * (self.total - self.done)
end

function P:_status()
  return string.format("%d/%d cells, %d failed, elapsed %s, ETA %s", self.done, self.total, self.failed,
    clock(self:elapsed()), self.done > 0 and clock(self:eta()) or "?")
end

function P:_draw()
  if not self.tty or self.finished then return end
  local bar_w = 20
  local filled = self.total > 0 and math.floor(bar_w * self.done / self.total) or bar_w
  local text = string.format("[%s%s] %s  %s", string.rep("#", filled), string.rep(".", bar_w - filled),
    self:_status(), self.current or "")
  if #text > self.width - 1 then text = text:sub(1, self.width - 1) end
  self.out:write("\r\27[K", text)
  self.out:flush()
end

function P:note(text)
  if self.tty then
    self.out:write("\r\27[K", text, "\n")
    self:_draw()
  else
    self.out:write(text, "\n")
    self.out:flush()
  end
end

function P:cell_start(key)
  self.current = key
  self.n = self.done + 1
  if self.tty then self:_draw() return end
  self.out:write(string.format("cell %d/%d: %s (%s)\n", self.n, self.total, key, self:_status()))
  self.out:flush()
end

function P:cell_end(status, secs, why)
  self.done = self.done + 1
  if status ~= "ok" then self.failed = self.failed + 1 end
  local line = string.format("cell %d/%d %s in %.2f s: %s%s", self.n or self.done, self.total, status,
    secs or 0, self.current or "", why and ("\n  " .. why) or "")
  self.current = nil
  if self.tty then
    if status ~= "ok" then self:note(line) else self:_draw() end
  else
    self.out:write(line, "\n")
    self.out:flush()
  end
end

function P:finish(text)
  if self.finished then return end
  if self.tty then
    self:_draw()
    self.out:write("\n")
  end
  self.finished = true
  if self.timer then self.timer:close() self.timer = nil end
  if text then self.out:write(text, "\n") end
  self.out:flush()
end

return M
