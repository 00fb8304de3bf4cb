-- tbrt/repl/console.lua - the terminal while the REPL owns it: keystrokes read
-- through the loop in raw mode, and every other writer (print, io.write,
-- io.stdout/io.stderr:write from tasks and timers) kept from garbling the
-- line being typed.
--
--   local con = console.open{ on_keys = function(events) ... end }
--   con.editor = ed              -- a tbrt.repl.lineedit editor drawing through con:raw_write
--   con.idle = true              -- the prompt is up: output hides it, then redraws it
--   con:close()                  -- cooked mode back, hooks off, handles closed
--
-- Output that arrives while the prompt is up erases the prompt line, is
-- written, and the prompt and what was typed are drawn again under it on the
-- next loop turn (a burst of prints redraws once). Output that does not end
-- its line gets a line break before the prompt comes back. The terminal's
-- mode is restored on every way out: close(), os.exit, SIGTERM and SIGHUP.
-- While the console is open SIGINT is a Ctrl-C key (raw mode turns the key
-- itself into a byte; a signal sent with kill gets the same treatment).
local uv = require("luv")
local keys = require("tbrt.repl.keys")

local M = {}

-- How long a lone ESC may wait for the rest of its sequence before it
-- counts as the Escape key: a terminal sends a sequence in one write, so
-- the bytes arrive together; 50 ms is the ttimeoutlen many vim users set.
local ESC_WAIT_MS = 50

local TTY_MODE_NORMAL, TTY_MODE_RAW = 0, 1
-- Exit codes for the signals that end the REPL: 128 + signal, as a shell reports them.
local EXIT_SIGNAL = { sighup = 128 + 1, sigterm = 128 + 15 }

local file_meta = getmetatable(io.stdout)

local Console = {}
Console.__index = Console

local function last_char(...)
  local last
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    if (type(v) == "string" or type(v) == "number") and #tostring(v) > 0 then last = tostring(v) end
  end
  return last and last:sub(-1)
end

-- Is fd 0 a terminal the REPL can use?
function M.usable()
  return uv.guess_handle(0) == "tty"
end

function M.open(opts)
  local self = setmetatable({ on_keys = opts.on_keys, idle = false, at_line_start = true,
    cols = 80 }, Console)
  local tty, err = uv.new_tty(0, true)
  if not tty then return nil, "console: stdin: " .. tostring(err) end
  self.tty = tty
  local w = tty:get_winsize()
  if w and w > 0 then self.cols = w end
  self.raw = {
    write = file_meta.write, print = print, io_write = io.write, exit = os.exit,
  }
  tty:set_mode(TTY_MODE_RAW)
  self:_hook()
  self.decoder = keys.decoder()
  self.esc_timer = uv.new_timer()
  self.redraw_timer = uv.new_timer()
  tty:read_start(function(rerr, data)
    if rerr or not data then
      self.on_keys({ { key = "hangup" } })
      return
    end
    self:_feed(data)
  end)
  self.signals = {}
  local function on_signal(name, fn)
    local s = uv.new_signal()
    s:start(name, fn)
    s:unref()
    self.signals[#self.signals + 1] = s
  end
  on_signal("sigwinch", function()
    local cw = tty:get_winsize()
    if cw and cw > 0 then self.cols = cw end
    if self.idle and self.editor and self.editor.shown then self.editor:show() end
  end)
  on_signal("sigint", function() self.on_keys({ { key = "ctrl-c" } }) end)
  for name, code in pairs(EXIT_SIGNAL) do
    on_signal(name, function() self:restore() self.raw.exit(code) end)
  end
  return self
end

function Console:width() return self.cols end

function Console:_feed(data)
  local events = self.decoder:feed(data)
  self.esc_timer:stop()
  if self.decoder:pending() then
    self.esc_timer:start(ESC_WAIT_MS, 0, function()
      local late = self.decoder:flush()
      if #late > 0 then self.on_keys(late) end
    end)
  end
  if #events > 0 then self.on_keys(events) end
end

-- Write to the terminal as the editor does: no hiding, no redraw.
function Console:raw_write(s)
  self.raw.write(io.stdout, s)
  io.stdout:flush()
end

-- Before output that is not the editor's: take the prompt down.
function Console:_before()
  if self.idle and self.editor and self.editor.shown then
    self.editor:hide()
    self.redraw_timer:start(0, 0, function() self:redraw() end)
  end
end

function Console:_after(last)
  if last then self.at_line_start = last == "\n" end
end

-- Start the next output on a line of its own.
function Console:line_start()
  if not self.at_line_start then
    self:raw_write("\n")
    self.at_line_start = true
  end
end

-- The prompt again, under whatever was printed.
function Console:redraw()
  if self.closed or not self.idle or not self.editor or self.editor.shown then return end
  self:line_start()
  self.editor:show()
end

function Console:_hook()
  local raw = self.raw
  local function out(f, ...)
    self:_before()
    local r = { raw.write(f, ...) }
    self:_after(last_char(...))
    f:flush()
    return unpack(r)
  end
  file_meta.write = function(f, ...)
    if f == io.stdout or f == io.stderr then return out(f, ...) end
    return raw.write(f, ...)
  end
  io.write = function(...)
    local f = io.output()
    if f == io.stdout then return out(f, ...) end
    return raw.io_write(...)
  end
  _G.print = function(...)
    local n = select("#", ...)
    local parts = {}
    for i = 1, n do parts[i] = tostring((select(i, ...))) end
    out(io.stdout, table.concat(parts, "\t"), "\n")
  end
  os.exit = function(...)
    self:restore()
    return raw.exit(...)
  end
end

-- Cooked mode and the plain functions back; safe to call more than once.
function Console:restore()
  if self.restored then return end
  self.restored = true
  uv.tty_reset_mode()
  local raw = self.raw
  file_meta.write, io.write, _G.print, os.exit = raw.write, raw.io_write, raw.print, raw.exit
end

function Console:close()
  if self.closed then return end
  self.closed = true
  self.idle = false
  if self.tty then pcall(self.tty.set_mode, self.tty, TTY_MODE_NORMAL) end
  self:restore()
  for _, h in ipairs({ self.tty, self.esc_timer, self.redraw_timer, unpack(self.signals) }) do
    if not h:is_closing() then h:close() end
  end
end

return M
