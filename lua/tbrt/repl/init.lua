-- tbrt/repl/init.lua - the REPL: Lua typed at a terminal and run on the loop,
-- or, when stdin is not a terminal, Lua read from it a chunk at a time.
--
--   local code, stop = require("tbrt.repl").run()   -- in a task (tbrt.main's main task)
--
-- On a terminal (tbrt.repl.console, raw mode): each entered chunk runs as a task
-- (tbrt.repl.eval) and the prompt comes back when it has finished; meanwhile
-- timers, links and other tasks go on, and what they print appears above
-- the prompt. Keys typed while a chunk runs wait for the prompt, except
-- Ctrl-C, which cancels the chunk's task ("canceled"); at the prompt
-- Ctrl-C drops the typed line and any unfinished chunk. Ctrl-D on an empty
-- line closes the links opened in the session (tbrt.repl.play) and ends the
-- REPL with 0; stop is true: the caller stops the loop.
--
-- Not a terminal: lines are read through the loop (libuv's thread pool, so
-- timers fire between them), each complete chunk runs and is waited for,
-- values go to stdout and errors to stderr, and reading goes on. The code
-- is 1 if any chunk (or a task nobody joined) failed, else 0; stop is false:
-- what the chunks left on the loop runs to the end, as a script's would.
local uv = require("luv")
local task = require("tbrt.task")
local eval = require("tbrt.repl.eval")
local pretty = require("tbrt.repl.pretty")
local play = require("tbrt.repl.play")
local history = require("tbrt.repl.history")

local M = {}

M.PROMPT = "tbrt> "
M.CONTINUE = "...> "
-- Bytes asked of stdin per read when it is not a terminal.
local READ_SIZE = 65536

local CALLBACK_ERROR_HOOK = "tbrt.callback_error"   -- as tbrt.main and bindings/host/main.c
local EAGAIN = "EAGAIN"

local function banner()
  local lib = "libtbrt not loaded"
  local ok, b = pcall(require, "tbrt.ffi")
  if ok then lib = "libtbrt " .. b.ffi.string(b.C.tbrt_version()) end
  return string.format("tbrt REPL - %s, %s, libuv %s\nhelp() for help, Ctrl-D to exit.",
    lib, jit and jit.version or _VERSION, uv.version_string())
end

-- Report failures that happen outside a chunk (tasks nobody joined, luv
-- callbacks) and go on, instead of ending the process as a script would.
-- Returns a function that puts the previous handlers back.
local function keep_going(report)
  local reg = debug.getregistry()
  local prev_cb = reg[CALLBACK_ERROR_HOOK]
  reg[CALLBACK_ERROR_HOOK] = function(msg) report("error in a callback: " .. tostring(msg)) end
  local prev_task = task.on_error(function(t, err)
    report(string.format("task %d failed: %s\n%s", t.id, tostring(t.error), t.traceback or err))
  end)
  return function()
    reg[CALLBACK_ERROR_HOOK] = prev_cb
    task.on_error(prev_task)
  end
end

---------------------------------------------------------------------------
-- On a terminal.

local function run_tty()
  local console = require("tbrt.repl.console")
  local lineedit = require("tbrt.repl.lineedit")
  local complete = require("tbrt.repl.complete")

  local s = { chunk = eval.chunk("=stdin"), queue = {}, interrupts = 0 }
  local finished = task.channel(1)
  local hist = history.open(history.default_path())
  local con, ed

  local function err_write(text) io.stderr:write(text, "\n") end

  local function prompt(p)
    con:line_start()
    con.idle = true
    ed:start(p or M.PROMPT)
  end

  local function quit(code)
    if s.quitting then return end
    s.quitting = true
    con.idle = false
    ed:finish()
    con.at_line_start = true
    if s.busy then s.busy:cancel("the REPL is exiting") end
    task.spawn(function()
      play.close_all()
      finished:send(code, 0)
    end)
  end

  local handle_key

  local function drain_queue()
    while not s.busy and not s.quitting and #s.queue > 0 do
      handle_key(table.remove(s.queue, 1))
    end
  end

  -- The chunk has finished (or was canceled before it ran): show how, and
  -- the prompt again.
  local function chunk_done(out)
    s.busy = nil
    local canceled = s.canceling
    s.canceling = false
    if s.quitting then return end
    if out.ok then
      if out.n > 0 then
        io.stdout:write(pretty.values(out, out.n), "\n")
      end
    elseif canceled and type(out.error) == "string" and out.error:find("^ECANCELED:") then
      err_write("canceled")
    else
      err_write(out.message)
    end
    prompt(M.PROMPT)
    drain_queue()
  end

  local function run_chunk(fn)
    con.idle = false
    s.busy = eval.spawn(fn, chunk_done)
  end

  local function on_line(line)
    con.at_line_start = true
    s.interrupts = 0
    hist:add(line)
    local r, err = s.chunk:add(line)
    if r == "incomplete" then return prompt(M.CONTINUE) end
    if r == "empty" then return prompt(M.PROMPT) end
    if not r then
      err_write(err)
      return prompt(M.PROMPT)
    end
    run_chunk(r)
  end

  local function on_interrupt()
    local empty = ed.buf == "" and not s.chunk:pending()
    ed:finish("^C")
    con.at_line_start = true
    s.chunk:reset()
    s.interrupts = empty and s.interrupts + 1 or 0
    if s.interrupts >= 2 then
      io.stdout:write("(Ctrl-C cancels a running line; Ctrl-D or os.exit() leaves the REPL)\n")
      s.interrupts = 0
    end
    prompt(M.PROMPT)
  end

  function handle_key(ev)
    if ev.key == "hangup" then return quit(0) end
    local what, line = ed:key(ev)
    if what == "line" then
      on_line(line)
    elseif what == "interrupt" then
      on_interrupt()
    elseif what == "eof" then
      quit(0)
    end
  end

  local function on_keys(events)
    for _, ev in ipairs(events) do
      if s.quitting then return end
      if not s.busy then
        handle_key(ev)
      elseif ev.key == "ctrl-c" then
        local t = s.busy
        s.canceling = true
        t:cancel("interrupted")
        -- a task canceled before its first turn never runs its chunk
        if t:status() == "canceled" and s.busy == t then
          chunk_done({ ok = false, error = "ECANCELED: interrupted", message = "canceled" })
        end
      elseif ev.key == "hangup" then
        quit(0)
      else
        s.queue[#s.queue + 1] = ev
      end
    end
  end

  local cerr
  con, cerr = console.open({ on_keys = on_keys })
  if not con then error(cerr, 0) end
  ed = lineedit.new({
    write = function(text) con:raw_write(text) end,
    width = function() return con:width() end,
    history = hist,
    complete = function(before) return complete.at(before, _G) end,
  })
  con.editor = ed
  local fixed_width = pretty.width
  pretty.width = function() return con:width() end
  local restore_hooks = keep_going(err_write)
  local why = play.install(_G)
  io.stdout:write(banner(), "\n")
  if why then err_write("tbrt is not loaded: " .. why) end
  if hist.why then err_write("history not saved: " .. hist.why) end
  prompt(M.PROMPT)
  local code = finished:recv()
  con:close()
  pretty.width = fixed_width
  restore_hooks()
  return code, true
end

---------------------------------------------------------------------------
-- Not a terminal: stdin a line at a time.

-- The next bytes of stdin ("" at the end), or nil, err.
local function read_stdin()
  while true do
    local data, err = task.park("stdin read", nil, function(w)
      local ok, rerr = uv.fs_read(0, READ_SIZE, -1, function(e, d) task.wake(w, d, e) end)
      if not ok then task.wake(w, nil, rerr) end
    end)
    if data then return data end
    if not (err and tostring(err):find(EAGAIN, 1, true)) then return nil, err end
    task.poll(0, "r")            -- a non-blocking stdin: wait until it has something
  end
end

local function run_lines()
  local chunk = eval.chunk("=stdin")
  local failed = false
  local function report(text)
    failed = true
    io.stdout:flush()
    io.stderr:write("tbrt: ", text, "\n")
    io.stderr:flush()
  end
  local restore_hooks = keep_going(report)
  local why = play.install(_G)
  if why then report("tbrt is not loaded: " .. why) end

  local function run(fn)
    local t = eval.spawn(fn, function(out)
      if out.ok then
        if out.n > 0 then io.stdout:write(pretty.values(out, out.n), "\n") end
      else
        report(out.message)
      end
      io.stdout:flush()
    end)
    t:join()
  end

  local function line(text)
    local r, err = chunk:add(text)
    if type(r) == "function" then
      run(r)
    elseif r == nil then
      report(err)
    end
  end

  local rest = ""
  while true do
    local data, err = read_stdin()
    if not data then
      report("stdin: " .. tostring(err))
      break
    end
    if data == "" then break end
    rest = rest .. data
    for l, nl in rest:gmatch("([^\n]*)(\n?)") do
      if nl == "" then rest = l break end
      line(l)
    end
  end
  if rest ~= "" then line(rest) end
  local fn, err = chunk:finish()
  if fn then run(fn) elseif err then report(err) end
  task.poll_close(0)
  restore_hooks()
  return failed and 1 or 0, false
end

-- The REPL on a terminal, or stdin a chunk at a time. Returns the exit
-- code and whether the caller should stop the loop now.
function M.run()
  if not task.current() then error("repl.run: call it in a task (tbrt.main's main task)", 2) end
  if require("tbrt.repl.console").usable() then return run_tty() end
  return run_lines()
end

return M
