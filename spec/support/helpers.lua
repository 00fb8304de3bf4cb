-- helpers.lua - shared spec helpers: where things are, running a program
-- (the tbrt program above all) as a child with a bound on every wait, and
-- temporary directories. busted runs it once as the helper (.busted); specs
-- take it with require("helpers").
--
--   local H = require("helpers")
--   local r = H.run_tbrt({ "-e", "print(1)" })    -- { code, signal, stdout, stderr, timed_out }
--   local dir = H.tmpdir() ... H.rmtree(dir)
--
-- The runs work inside a task (specs run inside the tbrt program) and
-- outside one (plain luajit): they go through task.run.
local uv = require("luv")
local task = require("tbrt.task")

local H = {}

local function absolute(path)
  if path:sub(1, 1) == "/" then return path end
  return uv.cwd() .. "/" .. path
end

-- The checkout, the build under test and its tbrt program.
H.root = absolute((debug.getinfo(1, "S").source:match("^@(.*)/spec/support/helpers%.lua$")) or ".")
H.build = absolute(os.getenv("TBRT_BUILD") or (H.root .. "/build"))
H.tbrt = H.build .. "/tbrt"

-- Bound on a child run unless a spec names one: generous for ASan builds,
-- far below the whole suite's budget.
H.RUN_TIMEOUT = 20

-- The current environment with changes: { NAME = "value" | false (remove) }.
local function environment(changes)
  local env = uv.os_environ()
  for k, v in pairs(changes or {}) do env[k] = v or nil end
  local list = {}
  for k, v in pairs(env) do list[#list + 1] = k .. "=" .. v end
  table.sort(list)
  return list
end

-- Run file with args as a child; returns { code, signal, stdout, stderr,
-- timed_out }. opts: stdin (string; otherwise the child's stdin is empty),
-- env (changes, see environment), cwd, timeout (s), signal (a name such
-- as "sigint") sent once stdout contains opts.signal_when (a plain string)
-- or after opts.signal_after seconds. A child still running at the
-- timeout is killed (SIGKILL) and timed_out is set.
function H.run(file, args, opts)
  opts = opts or {}
  return task.run(function()
    local r = { stdout = "", stderr = "", timed_out = false }
    local out_bufs, err_bufs = {}, {}
    local open = 3                      -- exit, stdout EOF, stderr EOF
    local stdin, stdout, stderr = uv.new_pipe(false), uv.new_pipe(false), uv.new_pipe(false)
    local signaled = false
    local child, pid_or_err

    local function send_signal()
      if not signaled and child and opts.signal then
        signaled = true
        child:kill(opts.signal)
      end
    end

    child, pid_or_err = uv.spawn(file, {
      args = args or {},
      env = environment(opts.env),
      cwd = opts.cwd,
      stdio = { stdin, stdout, stderr },
    }, function(code, signal)
      r.code, r.signal = code, signal
      open = open - 1
      child:close()
    end)
    if not child then
      for _, p in ipairs({ stdin, stdout, stderr }) do p:close() end
      error("H.run: cannot start " .. file .. ": " .. tostring(pid_or_err), 0)
    end

    local function reader(bufs, pipe)
      return function(err, data)
        if data then
          bufs[#bufs + 1] = data
          if bufs == out_bufs and opts.signal_when and
              table.concat(out_bufs):find(opts.signal_when, 1, true) then
            send_signal()
          end
        else           -- EOF or error: the stream is over either way
          if err then bufs[#bufs + 1] = "\n[read error: " .. err .. "]" end
          pipe:close()
          open = open - 1
        end
      end
    end
    stdout:read_start(reader(out_bufs, stdout))
    stderr:read_start(reader(err_bufs, stderr))
    if opts.stdin then
      stdin:write(opts.stdin)
    end
    stdin:shutdown(function() stdin:close() end)

    if opts.signal_after then
      task.spawn(function() task.sleep(opts.signal_after) send_signal() end)
    end

    local ok = task.wait(function() return open == 0 end, opts.timeout or H.RUN_TIMEOUT)
    if not ok then
      r.timed_out = true
      if r.code == nil then child:kill("sigkill") end
      for _, p in ipairs({ stdout, stderr }) do
        if not p:is_closing() then p:close() end
      end
      -- the exit callback still comes once the child is reaped
      task.wait(function() return r.code ~= nil end, 5)
    end
    r.stdout, r.stderr = table.concat(out_bufs), table.concat(err_bufs)
    return r
  end)
end

-- Start file with args (in a task) and let it run: a handle with
--   :stdout(), :stderr()          what it wrote so far
--   :expect(text, timeout, "err") wait (bounded) until stdout (or stderr) holds text
--   :wait(timeout)                { code, signal, stdout, stderr, timed_out } (SIGKILL at the bound)
--   :kill(sig)
-- opts: env (changes, as H.run).
function H.spawn(file, args, opts)
  opts = opts or {}
  local out, err = uv.new_pipe(false), uv.new_pipe(false)
  local bufs = { out = {}, err = {} }
  local h, open = {}, 3
  local proc, pid = uv.spawn(file, { args = args or {}, env = environment(opts.env),
    stdio = { nil, out, err } }, function(code, signal)
      h.code, h.signal = code, signal
      open = open - 1
    end)
  if not proc then
    out:close() err:close()
    error("H.spawn: cannot start " .. file .. ": " .. tostring(pid), 0)
  end
  h.pid = pid
  local function reader(list, pipe)
    return function(_, data)
      if data then list[#list + 1] = data else pipe:close() open = open - 1 end
    end
  end
  out:read_start(reader(bufs.out, out))
  err:read_start(reader(bufs.err, err))
  function h:stdout() return table.concat(bufs.out) end
  function h:stderr() return table.concat(bufs.err) end
  function h:expect(text, timeout, which)
    local list = which == "err" and bufs.err or bufs.out
    return task.wait(function() return table.concat(list):find(text, 1, true) ~= nil end,
      timeout or H.RUN_TIMEOUT)
  end
  function h:kill(sig) if h.code == nil then proc:kill(sig or "sigkill") end end
  function h:wait(timeout)
    local ok = task.wait(function() return open == 0 end, timeout or H.RUN_TIMEOUT)
    if not ok then
      h:kill("sigkill")
      task.wait(function() return open == 0 end, 5)
    end
    if not proc:is_closing() then proc:close() end
    return { code = h.code, signal = h.signal, stdout = h:stdout(), stderr = h:stderr(),
      timed_out = not ok }
  end
  return h
end

-- Run the tbrt program under test: H.run(H.tbrt, args, opts).
function H.run_tbrt(args, opts)
  return H.run(H.tbrt, args, opts)
end

-- A description of a run for assertion messages.
function H.describe(r)
  return string.format("code=%s signal=%s timed_out=%s\n--- stdout\n%s\n--- stderr\n%s",
    tostring(r.code), tostring(r.signal), tostring(r.timed_out), r.stdout, r.stderr)
end

function H.tmpdir()
  return assert(uv.fs_mkdtemp("/tmp/tbrt-spec-XXXXXX"))
end

local function shell_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

function H.rmtree(path)
  assert(path:match("^/tmp/tbrt%-spec%-"), "H.rmtree only removes H.tmpdir() directories")
  os.execute("rm -rf " .. shell_quote(path))
end

function H.write_file(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
  return path
end

function H.read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

-- Seconds since an arbitrary point, for timing assertions.
function H.now() return uv.hrtime() / 1e9 end

return H
