-- pty.lua - drive a program in a real pseudo-terminal, as a user at a
-- keyboard would: type keys, read the screen. For the REPL specs.
--
--   local pty = require("pty")
--   local p = pty.spawn(H.tbrt, { args }, { env = { TBRT_HISTORY = path } })  -- in a task
--   p:expect("tbrt> ")               -- wait (bounded) for text in the output
--   p:send("1+1\r")                  -- keystrokes (pty.keys has the escape sequences)
--   p:expect("\n2\n")
--   p:screen()                       -- the screen as text, after cursor moves and erases
--   local code = p:wait_exit()
--   p:close()
--
-- The terminal is posix_openpt's (LuaJIT FFI): the child gets the slave as
-- stdin, stdout and stderr (uv.spawn with the fd), the master is read by a
-- task on the loop (task.poll). Output is kept twice: as a stream with the
-- escape sequences and carriage returns taken out (expect() consumes it in
-- order, as pexpect does), and as a screen: a small VT100 model (printable
-- text, CR, LF, BS, TAB, CSI K/J/C/D/A/B/G/H, SGR ignored) so a spec can
-- check what the user would see, e.g. that a prompt redrawn after a
-- timer's print is whole. The slave stays open in this process until
-- close(), so the terminal's mode can be checked after the child is gone.
local ffi = require("ffi")
local uv = require("luv")
local task = require("tbrt.task")
require("tbrt.libc")        -- read, write, close, fcntl, strerror

local C = ffi.C
ffi.cdef [[
  int posix_openpt(int flags);
  int grantpt(int fd);
  int unlockpt(int fd);
  char *ptsname(int fd);
  int open(const char *path, int flags, ...);
  int ioctl(int fd, unsigned long request, ...);
  struct tbrt_spec_winsize { unsigned short ws_row, ws_col, ws_xpixel, ws_ypixel; };
  struct tbrt_spec_termios {
    unsigned int c_iflag, c_oflag, c_cflag, c_lflag;
    unsigned char c_line;
    unsigned char c_cc[32];
    unsigned int c_ispeed, c_ospeed;
  };
  int tcgetattr(int fd, struct tbrt_spec_termios *t);
]]

local M = {}

-- <fcntl.h>, <asm-generic/ioctls.h>, <termios.h> on Linux.
local O_RDWR, O_NOCTTY, O_CLOEXEC, O_NONBLOCK = 2, 256, 524288, 2048
local F_SETFL = 4
local TIOCSWINSZ = 0x5414
M.ICANON, M.ECHO, M.ISIG = 2, 8, 1
local EAGAIN, EIO = 11, 5

-- Bound on each wait unless a spec names one: an ASan build starts slowly.
M.TIMEOUT = 10
M.WIDTH, M.HEIGHT = 80, 24

M.keys = {
  up = "\27[A", down = "\27[B", right = "\27[C", left = "\27[D", home = "\27[H", ["end"] = "\27[F",
  delete = "\27[3~", backspace = "\127", tab = "\t", enter = "\r",
  ctrl_a = "\1", ctrl_c = "\3", ctrl_d = "\4", ctrl_e = "\5", ctrl_k = "\11", ctrl_l = "\12",
  ctrl_u = "\21", ctrl_w = "\23",
}

---------------------------------------------------------------------------
-- The screen model.

local Screen = {}
Screen.__index = Screen

local function new_screen(width, height)
  return setmetatable({ width = width, height = height, lines = { {} }, row = 1, col = 0 }, Screen)
end

function Screen:_line(r)
  while #self.lines < r do self.lines[#self.lines + 1] = {} end
  return self.lines[r]
end

function Screen:_top() return math.max(1, #self.lines - self.height + 1) end

function Screen:_put(ch)
  if self.col >= self.width then          -- autowrap
    self.row, self.col = self.row + 1, 0
  end
  local line = self:_line(self.row)
  for i = #line + 1, self.col do line[i] = " " end
  line[self.col + 1] = ch
  self.col = self.col + 1
end

function Screen:_csi(params, final)
  local n = tonumber(params:match("^%d+")) or nil
  local line = self:_line(self.row)
  if final == "K" then
    if n == 1 then
      for i = 1, math.min(self.col + 1, #line) do line[i] = " " end
    else
      local keep = n == 2 and 0 or self.col
      for i = #line, keep + 1, -1 do line[i] = nil end
    end
  elseif final == "J" then
    local top = self:_top()
    if n == 2 or n == 3 then
      for r = top, #self.lines do self.lines[r] = {} end
    else
      self:_csi("", "K")
      for r = self.row + 1, #self.lines do self.lines[r] = {} end
    end
  elseif final == "C" then
    self.col = math.min(self.col + (n or 1), self.width - 1)
  elseif final == "D" then
    self.col = math.max(self.col - (n or 1), 0)
  elseif final == "A" then
    self.row = math.max(self.row - (n or 1), self:_top())
  elseif final == "B" then
    self.row = self.row + (n or 1)
    self:_line(self.row)
  elseif final == "G" then
    self.col = math.max((n or 1) - 1, 0)
  elseif final == "H" or final == "f" then
    local r, c = params:match("^(%d*);?(%d*)$")
    self.row = self:_top() + math.max((tonumber(r) or 1) - 1, 0)
    self.col = math.max((tonumber(c) or 1) - 1, 0)
    self:_line(self.row)
  end
end

-- Feed output bytes; returns them with escapes and CRs taken out.
function Screen:feed(s)
  s = (self.rest or "") .. s
  self.rest = nil
  local plain, i, n = {}, 1, #s
  while i <= n do
    local c = s:sub(i, i)
    if c == "\27" then
      local params, final, after = s:match("^%[([%d;?]*)([%a@~`{|}])()", i + 1)
      if params then
        if params:sub(1, 1) ~= "?" then self:_csi(params, final) end
        i = after
      elseif i + 1 > n or s:find("^%[[%d;?]*$", i + 1) then
        self.rest = s:sub(i)               -- the rest comes with the next read
        break
      else
        i = i + 2                          -- ESC x: nothing the REPL sends
      end
    elseif c == "\r" then
      self.col = 0
      i = i + 1
    elseif c == "\n" then
      self.row = self.row + 1
      self:_line(self.row)
      plain[#plain + 1] = "\n"
      i = i + 1
    elseif c == "\b" then
      self.col = math.max(self.col - 1, 0)
      i = i + 1
    elseif c == "\t" then
      self.col = math.min((math.floor(self.col / 8) + 1) * 8, self.width - 1)
      plain[#plain + 1] = "\t"
      i = i + 1
    elseif c:byte() < 32 then
      i = i + 1
    else
      local ch = s:match("^[^\128-\191][\128-\191]*", i)
      self:_put(ch)
      plain[#plain + 1] = ch
      i = i + #ch
    end
  end
  return table.concat(plain)
end

function Screen:text()
  local out = {}
  for r, line in ipairs(self.lines) do out[r] = (table.concat(line):gsub("%s+$", "")) end
  while #out > 1 and out[#out] == "" and #out > self.row do out[#out] = nil end
  return table.concat(out, "\n")
end

function Screen:cursor_line()
  return (table.concat(self:_line(self.row)):gsub("%s+$", ""))
end

---------------------------------------------------------------------------
-- The terminal and the program in it.

local Pty = {}
Pty.__index = Pty

local function environment(changes)
  local env = uv.os_environ()
  for k, v in pairs(changes or {}) do env[k] = v or nil end
  local list = {}
  for k, v in pairs(env) do list[#list + 1] = k .. "=" .. v end
  return list
end

local function check(rc, what)
  if rc < 0 then error("pty: " .. what .. ": " .. ffi.string(C.strerror(ffi.errno())), 3) end
  return rc
end

-- Start file with args in a new terminal (width x height). opts: env
-- (changes: NAME = value | false), cwd, width, height. In a task.
function M.spawn(file, args, opts)
  opts = opts or {}
  local master = check(C.posix_openpt(O_RDWR + O_NOCTTY + O_CLOEXEC), "posix_openpt")
  check(C.grantpt(master), "grantpt")
  check(C.unlockpt(master), "unlockpt")
  check(C.fcntl(master, F_SETFL, ffi.cast("int", O_NONBLOCK)), "fcntl O_NONBLOCK")
  local name = ffi.string(C.ptsname(master))
  local slave = check(C.open(name, O_RDWR + O_NOCTTY + O_CLOEXEC), "open " .. name)
  local ws = ffi.new("struct tbrt_spec_winsize")
  ws.ws_col, ws.ws_row = opts.width or M.WIDTH, opts.height or M.HEIGHT
  check(C.ioctl(master, TIOCSWINSZ, ws), "TIOCSWINSZ")
  local self = setmetatable({ master = master, slave = slave, name = name, stream = "", mark = 0,
    raw = {}, screen_model = new_screen(ws.ws_col, ws.ws_row) }, Pty)
  local proc, pid = uv.spawn(file, { args = args or {}, env = environment(opts.env), cwd = opts.cwd,
    stdio = { slave, slave, slave } }, function(code, signal)
    self.code, self.signal = code, signal
    self.proc:close()
  end)
  if not proc then
    C.close(slave)
    C.close(master)
    error("pty: cannot start " .. file .. ": " .. tostring(pid), 2)
  end
  self.proc, self.pid = proc, pid
  self.reader = task.spawn(function() self:_read_loop() end)
  return self
end

function Pty:_read_loop()
  local buf = ffi.new("char[4096]")
  while not self.closed do
    local r = tonumber(C.read(self.master, buf, 4096))
    if r > 0 then
      local s = ffi.string(buf, r)
      self.raw[#self.raw + 1] = s
      self.stream = self.stream .. self.screen_model:feed(s)
    elseif r == 0 or ffi.errno() == EIO then
      break
    elseif ffi.errno() == EAGAIN then
      local ok, err = task.poll(self.master, "r", 1)
      if not ok and err and not err:match("^ETIMEDOUT") then break end
    else
      break
    end
  end
end

-- Change the terminal's size. The kernel signals the terminal's foreground
-- process group, which the child is not in (the terminal is not its
-- controlling one), so it gets SIGWINCH from here.
function Pty:resize(width, height)
  local ws = ffi.new("struct tbrt_spec_winsize")
  ws.ws_col, ws.ws_row = width, height or self.screen_model.height
  check(C.ioctl(self.master, TIOCSWINSZ, ws), "TIOCSWINSZ")
  self.screen_model.width, self.screen_model.height = ws.ws_col, ws.ws_row
  self.proc:kill("sigwinch")
end

-- Type: bytes as the terminal would send them for keys.
function Pty:send(s)
  local off = 0
  while off < #s do
    local n = tonumber(C.write(self.master, ffi.cast("const char *", s) + off, #s - off))
    if n < 0 then error("pty: write: " .. ffi.string(C.strerror(ffi.errno())), 2) end
    off = off + n
  end
end

function Pty:screen() return self.screen_model:text() end
function Pty:cursor_line() return self.screen_model:cursor_line() end
function Pty:output() return table.concat(self.raw) end

function Pty:describe()
  return string.format("--- screen\n%s\n--- stream after the last match\n%q", self:screen(),
    self.stream:sub(self.mark + 1))
end

-- Wait until the stream, after the last match, contains text (plain
-- text unless opts.pattern); returns the captures (or the match) and
-- moves past it. Raises with the screen if the wait runs out.
function Pty:expect(text, timeout, pattern)
  local found
  local ok = task.wait(function()
    local r = { self.stream:find(text, self.mark + 1, not pattern) }
    if r[1] then
      found = r
      return true
    end
    return false
  end, timeout or M.TIMEOUT)
  if not ok then
    error(string.format("pty: %q did not appear within %g s\n%s", text, timeout or M.TIMEOUT,
      self:describe()), 2)
  end
  self.mark = found[2]
  if #found > 2 then return unpack(found, 3) end
  return self.stream:sub(found[1], found[2])
end

-- Wait until cond(screen_text) is true (or the screen matches a pattern).
function Pty:wait_screen(cond, timeout)
  local test = type(cond) == "function" and cond or function(s) return s:find(cond) ~= nil end
  local ok = task.wait(function() return test(self:screen()) end, timeout or M.TIMEOUT)
  if not ok then
    error(string.format("pty: the screen did not become as expected within %g s\n%s",
      timeout or M.TIMEOUT, self:describe()), 2)
  end
end

-- Nothing new in the stream for `quiet` seconds (to check that something
-- does NOT happen). Returns what arrived meanwhile.
function Pty:settle(quiet)
  local before = #self.stream
  task.sleep(quiet)
  return self.stream:sub(before + 1)
end

-- The exit: code, signal; raises if the program is still running after timeout.
function Pty:wait_exit(timeout)
  local ok = task.wait(function() return self.code ~= nil end, timeout or M.TIMEOUT)
  if not ok then
    error(string.format("pty: the program did not exit within %g s\n%s", timeout or M.TIMEOUT,
      self:describe()), 2)
  end
  return self.code, self.signal
end

-- The terminal's local modes now (ICANON, ECHO, ISIG bits), as the
-- program left them.
function Pty:lflag()
  local t = ffi.new("struct tbrt_spec_termios")
  check(C.tcgetattr(self.slave, t), "tcgetattr")
  return tonumber(t.c_lflag)
end

-- Kill the program if it still runs, stop reading, close both ends.
function Pty:close()
  if self.closed then return end
  if self.code == nil and self.proc and not self.proc:is_closing() then
    self.proc:kill("sigkill")
    task.wait(function() return self.code ~= nil end, M.TIMEOUT)
  end
  self.closed = true
  task.poll_close(self.master)
  self.reader:join(M.TIMEOUT)
  C.close(self.master)
  C.close(self.slave)
end

M.Screen = new_screen
return M
