-- tbrt/matrix/proc.lua - child processes of the matrix driver (ip, ssh,
-- mpirun, srun, gnuplot, the agents): started with luv, every wait bounded,
-- output captured up to a limit, and stopped TERM-then-KILL.
--
--   local p = assert(proc.spawn({ "ip", "netns", "add", name }, { detached = true }))
--   p:wait(5)                      -> code, signal | nil, "ETIMEDOUT: ..."
--   p:stop(2)                      TERM, then KILL after 2 s; waits for the exit
--   local r = proc.run(argv, { timeout = 10 })   -> { code, signal, stdout, stderr } | nil, err
--   proc.check(argv, what)         -> stdout | nil, "what: ... (exit N): stderr"
--
-- Waits need a task (the driver runs in one). A child started detached is
-- a session leader of its own, so a Ctrl-C on the driver's terminal reaches
-- the driver only, and the driver decides how its children stop.
local uv = require("luv")
local task = require("tbrt.task")

local M = {}

local CAPTURE_MAX = 1024 * 1024     -- bytes of stdout/stderr kept per child

local Proc = {}
Proc.__index = Proc
M.Proc = Proc

local function environment(changes)
  local env = uv.os_environ()
  for k, v in pairs(changes or {}) do env[k] = v or nil end
  local list = {}
  for k, v in pairs(env) do list[#list + 1] = k .. "=" .. v end
  table.sort(list)
  return list
end

local function quote(argv)
  local out = {}
  for i, a in ipairs(argv) do out[i] = a:match("^[%w%-%./_:=@,+]+$") and a or ("'" .. a:gsub("'", "'\\''") .. "'") end
  return table.concat(out, " ")
end
M.quote = quote

-- Start argv[1] with argv[2..]. opts: env (changes: NAME = value | false),
-- cwd, detached, stdin (a string written then closed; otherwise empty),
-- on_line(stream, line) for each output line ("out" | "err") instead of
-- capturing, log (a file handle every line is also written to).
function M.spawn(argv, opts)
  opts = opts or {}
  local self = setmetatable({ argv = argv, out = {}, err = {}, kept = { out = 0, err = 0 },
    open = 0, name = opts.name or argv[1] }, Proc)
  local pin, pout, perr = uv.new_pipe(false), uv.new_pipe(false), uv.new_pipe(false)
  local args = {}
  for i = 2, #argv do args[i - 1] = argv[i] end
  local handle, pid = uv.spawn(argv[1], {
    args = args, env = environment(opts.env), cwd = opts.cwd, detached = opts.detached,
    stdio = { pin, pout, perr },
  }, function(code, signal)
    self.code, self.signal = code, signal
    self.exited = true
    if self.handle and not self.handle:is_closing() then self.handle:close() end
  end)
  if not handle then
    for _, p in ipairs { pin, pout, perr } do p:close() end
    return nil, string.format("ENOENT: cannot start %s: %s", argv[1], tostring(pid))
  end
  self.handle, self.pid = handle, pid
  local function reader(stream, pipe)
    local partial = ""
    self.open = self.open + 1
    pipe:read_start(function(e, data)
      if data then
        if opts.log then opts.log:write(data) opts.log:flush() end
        if opts.on_line then
          partial = partial .. data
          for line in partial:gmatch("([^\n]*)\n") do opts.on_line(stream, line) end
          partial = partial:match("[^\n]*$")
          if #partial > 65536 then partial = "" end
        end
        local room = CAPTURE_MAX - self.kept[stream]
        if room > 0 then
          local piece = #data <= room and data or data:sub(1, room)
          local list = stream == "out" and self.out or self.err
          list[#list + 1] = piece
          self.kept[stream] = self.kept[stream] + #piece
        end
      else
        if opts.on_line and partial ~= "" then opts.on_line(stream, partial) end
        if e then
          local list = stream == "out" and self.out or self.err
          list[#list + 1] = "\n[read error: " .. e .. "]"
        end
        pipe:close()
        self.open = self.open - 1
      end
    end)
  end
  reader("out", pout)
  reader("err", perr)
  if opts.stdin then pin:write(opts.stdin) end
  pin:shutdown(function() pin:close() end)
  return self
end

function Proc:stdout() return table.concat(self.out) end
function Proc:stderr() return table.concat(self.err) end

-- How it ended, in words: "exit 3", "killed by signal 9", "running".
function Proc:how()
  if not self.exited then return "running" end
  if self.signal and self.signal ~= 0 then return "killed by signal " .. self.signal end
  return "exit " .. tostring(self.code)
end

-- Wait for the exit (and the end of its output) within timeout seconds.
function Proc:wait(timeout)
  local ok = task.wait(function() return self.exited and self.open == 0 end, timeout)
  if not ok then
    if self.exited then return self.code, self.signal end   -- a grandchild holds the pipes
    return nil, string.format("ETIMEDOUT: %s (pid %d) still running after %g s", self.name,
      self.pid, timeout)
  end
  return self.code, self.signal
end

function Proc:kill(sig)
  if self.exited or not self.handle or self.handle:is_closing() then return false end
  return self.handle:kill(sig or "sigterm") == 0
end

-- TERM (or sig), then KILL after grace seconds; waits (bounded) for the exit.
function Proc:stop(grace, sig)
  if self.exited then return true end
  self:kill(sig or "sigterm")
  if task.wait(function() return self.exited end, grace or 2) then return true end
  self:kill("sigkill")
  return task.wait(function() return self.exited end, 5) and true or false
end

-- Run to the end: { code, signal, stdout, stderr }, or nil, err when it
-- cannot start or outlives opts.timeout (default 30 s; it is killed then).
function M.run(argv, opts)
  opts = opts or {}
  local p, err = M.spawn(argv, opts)
  if not p then return nil, err end
  local code, werr = p:wait(opts.timeout or 30)
  if not code and not p.exited then
    p:stop(1, "sigkill")
    return nil, werr
  end
  return { code = p.code, signal = p.signal, stdout = p:stdout(), stderr = p:stderr() }
end

-- Run and expect exit 0: stdout, or nil, "what: argv: exit N: stderr".
function M.check(argv, what, opts)
  local r, err = M.run(argv, opts)
  if not r then return nil, string.format("%s: %s: %s", what, quote(argv), err) end
  if r.code ~= 0 or (r.signal or 0) ~= 0 then
    local msg = (r.stderr ~= "" and r.stderr or r.stdout):gsub("%s+$", "")
    return nil, string.format("%s: `%s` failed (%s): %s", what, quote(argv),
      (r.signal or 0) ~= 0 and ("signal " .. r.signal) or ("exit " .. r.code), msg:sub(1, 400))
  end
  return r.stdout
end

-- Is a program on PATH? Its path, or nil.
function M.which(name)
  if name:find("/", 1, true) then
    return uv.fs_access(name, "x") and name or nil
  end
  for dir in (os.getenv("PATH") or "/usr/bin:/bin"):gmatch("[^:]+") do
    local p = dir .. "/" .. name
    if uv.fs_access(p, "x") then return p end
  end
end

return M
