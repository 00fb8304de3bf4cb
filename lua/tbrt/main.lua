-- tbrt/main.lua - the Lua side of the tbrt program: bindings/host calls
-- main(argv) with the command line. It picks a mode, runs the script as the
-- main task on the loop, runs the loop until nothing is left to do, and
-- turns errors into "tbrt: <message>" with a traceback, and exit codes.
--
--   tbrt script.lua args...       run a script (global arg as luajit sets it)
--   tbrt -e CODE [script args...] run CODE first (-e and -l NAME may repeat)
--   tbrt -i [script args...]      then the REPL, with the script's globals
--   tbrt - args...                the script comes from stdin
--   tbrt                          the REPL on a terminal; otherwise stdin
--                                 is run a chunk at a time (tbrt.repl)
--   tbrt devices [-v] ...         a subcommand (tbrt.cli.COMMANDS)
--   tbrt exec [opts] -- PROG ...  run PROG on tbrt's libibverbs (tbrt.cli.exec)
--   tbrt -v | -h                  version | usage
--
-- The command line is parsed by tbrt.cli (lua-argparse); options stop at
-- the script's name, so the script's own arguments are never touched.
--
-- The main chunk, the -e chunks and -l modules run in the main task, so
-- they may wait (task.sleep, t:join, ...) at top level. They find the
-- library as the global tbrt (as the REPL does); -l NAME puts the module in
-- the global NAME, as lua -l does (a dotted name: its last part; G=NAME:
-- in G). Exit codes: 0 once
-- the main chunk has returned and no handle is left active (like luvit);
-- n from os.exit(n); 1 for an uncaught error (in the script, in a task
-- nobody joined, in a raw luv callback) or when the main task waits for
-- something nothing on the loop can bring. An unhandled SIGINT ends the
-- process as it ends luajit (killed by the signal, which a shell reports
-- as 130); a script may catch it with uv.new_signal.
--
-- The REPL (and stdin read a chunk at a time) runs in the main task after
-- the script: it returns the exit code (0 for Ctrl-D or the end of the
-- input; 1 if a piped chunk failed). Leaving the REPL on a terminal stops
-- the loop even if timers are still running; piped input lets the loop
-- finish what the chunks started, as a script does.
--
-- Modes are a table: modes.NAME(plan) -> exit code, picked by choose_mode.
local uv = require("luv")
local task = require("tbrt.task")

local M = {}

local THIS_FILE = debug.getinfo(1, "S").short_src

-- Registry key the host's luv callback wrapper looks up (bindings/host/main.c).
local CALLBACK_ERROR_HOOK = "tbrt.callback_error"

local cli = require("tbrt.cli")

-- An error to report without a traceback (a script that does not compile
-- or cannot be opened: where tbrt was at that moment says nothing).
local Plain = {}
Plain.__index = Plain
Plain.__tostring = function(self) return self.message end
local function plain_error(msg) error(setmetatable({ message = msg }, Plain), 0) end

local function report(text)
  io.stdout:flush()
  io.stderr:write("tbrt: ", text, "\n")
  io.stderr:flush()
end

local function fail(text)
  report(text)
  os.exit(1)
end

-- argv: [0] = the program, [1..n] = its arguments. Returns the plan
-- (tbrt.cli.parse): pre = { {kind = "e" | "l", value} ... } in order,
-- script (nil, "-" or a path) at argv[script_index], interactive, ...
function M.parse(argv)
  return cli.parse(argv)
end

local function choose_mode(plan)
  if plan.command == "exec" then return "exec" end
  if plan.command then return "command" end
  if plan.help then return "help" end
  if plan.version then return "version" end
  if plan.script == "-" then return "stdin" end
  if plan.script or #plan.pre > 0 then return "script" end
  return "repl"
end

-- arg as luajit sets it: the script at 0, its arguments at 1.., everything
-- before it (the program, options) at negative indices.
local function script_arg(argv, at)
  local a = {}
  for i = 0, argv.n or #argv do a[i - at] = argv[i] end
  return a
end

local function load_script(plan)
  local s = plan.script
  if s == nil then return nil end
  if s == "-" then
    local code = io.stdin:read("*a")
    if code == nil then plain_error("cannot read the script from stdin") end
    local f, err = loadstring(code, "=stdin")
    if not f then plain_error(err) end
    return f
  end
  local f, err = loadfile(s)
  if not f then plain_error(err) end
  return f
end

-- The main task: -l and -e in order, then the script with its arguments.
-- Its own error ends the process (nobody else joins it).
-- -jCMD[=ARG[,ARG...]] as luajit takes it: on/off/flush switch the JIT,
-- anything else starts the jit.CMD module (v, p, dump) with the arguments.
local function jit_command(cmd)
  local name, rest = cmd:match("^([%w_]+)=?(.*)$")
  if not name then plain_error("-j" .. cmd .. ": expected -jCMD[=ARG[,ARG...]]") end
  if name == "on" or name == "off" or name == "flush" then
    jit[name]()
    return
  end
  local ok, mod = pcall(require, "jit." .. name)
  if not ok or type(mod) ~= "table" or not mod.start then
    plain_error("-j" .. cmd .. ": no LuaJIT module jit." .. name .. " with a start()")
  end
  local args = {}
  for a in rest:gmatch("[^,]+") do args[#args + 1] = a end
  mod.start(unpack(args))
end

local function main_body(plan)
  local traceback
  local function handler(e)
    -- the frames from this file down are tbrt's, not the script's
    local tb = task.traceback(2)
    local cut = tb:find("\n%s*" .. THIS_FILE:gsub("%p", "%%%0") .. ":")
    traceback = cut and tb:sub(1, cut - 1) or tb
    return e
  end
  local ok, err = xpcall(function()
    for _, p in ipairs(plan.pre) do
      if p.kind == "l" then
        local global, name = M.l_names(p.value)
        local ok, mod = pcall(require, name)
        if not ok then plain_error("-l " .. p.value .. ": " .. tostring(mod)) end
        rawset(_G, global, mod)
      elseif p.kind == "j" then
        jit_command(p.value)
      else
        local f, e = loadstring(p.value, "=(command line)")
        if not f then plain_error(e) end
        f()
      end
    end
    local main_chunk = load_script(plan)
    if main_chunk then
      local argv, at = plan.argv, plan.script_index
      main_chunk(unpack(argv, at + 1, argv.n or #argv))
    end
  end, handler)
  if ok and plan.interactive then
    local repl = require("tbrt.repl")
    local code, stop = repl.run()
    plan.exit_code = code
    -- leaving the terminal REPL ends the program, timers or not
    if stop then uv.stop() end
    return
  end
  if not ok then
    if getmetatable(err) == Plain then fail(err.message) end
    fail(tostring(err) .. "\n" .. traceback)
  end
end

-- -l VALUE -> the global to set and the module to require: "G=mod.x" ->
-- G, mod.x; "mod.x" -> x, mod.x; "mod" -> mod, mod.
function M.l_names(value)
  local global, name = value:match("^([%a_][%w_]*)=(.+)$")
  if global then return global, name end
  return value:match("([^%.]+)$") or value, value
end

-- The library as the global tbrt, loaded when first used (so -e code may
-- still set up package.path or package.preload before it loads). When it
-- cannot load (no libtbrt), using the global raises why; scripts that do
-- not use it run. A script that sets a metatable of its own on _G takes
-- this one's place (require("tbrt") always works).
local function lazy_tbrt_global()
  if rawget(_G, "tbrt") ~= nil or getmetatable(_G) ~= nil then return end
  setmetatable(_G, { __index = function(g, k)
    if k ~= "tbrt" then return nil end
    setmetatable(g, nil)
    local ok, lib = pcall(require, "tbrt")
    if not ok then error("the tbrt library is not loaded: " .. tostring(lib), 2) end
    rawset(g, "tbrt", lib)
    return lib
  end })
end

-- The program runs the loop; a script written for plain luajit that ends
-- with uv.run() would run it again from inside a callback, which libuv does
-- not allow. Make that a clear error instead.
local raw_run = uv.run
local function guarded_run(mode)
  if uv.loop_mode() ~= nil then
    error("uv.run: the loop is already running (the tbrt program runs it until no handle " ..
      "is active: return from the script instead, or wait with tbrt.task)", 2)
  end
  return raw_run(mode)
end

-- Close what is still open (unref'd handles, stopped ones) and let the
-- close callbacks run, so the host can close the state and the loop.
local function shutdown()
  uv.walk(function(h) if not h:is_closing() then h:close() end end)
  uv.run("default")
end

local modes = {}
M.modes = modes

function modes.help()
  print(cli.help())
  return 0
end

function modes.version()
  local lib = "libtbrt not loaded"
  local ok, b = pcall(require, "tbrt.ffi")
  if ok then
    lib = "libtbrt " .. b.ffi.string(b.C.tbrt_version()) .. " (" .. b.path .. ")"
  else
    lib = lib .. ": " .. tostring(b)
  end
  print(string.format("tbrt: %s, %s, libuv %s", lib, jit and jit.version or _VERSION,
    uv.version_string()))
  return 0
end

-- Run the main task, then the loop until nothing is left.
function modes.script(plan)
  _G.arg = script_arg(plan.argv, plan.script_index)
  lazy_tbrt_global()
  local main_task = task.spawn(main_body, plan)
  uv.run("default")
  local code = 0
  local state = main_task:status()
  if state ~= "done" then
    local w = main_task.wait
    report(string.format("the main task is %s%s, but nothing left on the loop can wake it",
      state, w and (" in " .. w.op) or ""))
    code = 1
  end
  shutdown()
  return code ~= 0 and code or plan.exit_code or 0
end
modes.stdin = modes.script

-- No script and no -e: the REPL (or stdin a chunk at a time).
function modes.repl(plan)
  plan.interactive = true
  return modes.script(plan)
end

-- A subcommand (tbrt.cli.COMMANDS): its exit code; an error it raises is
-- reported as "tbrt: <message>", exit 1.
function modes.command(plan)
  local ok, code = pcall(cli.run, plan)
  if not ok then
    report(tostring(code))
    return 1
  end
  return code
end

-- tbrt exec: replaces this process with the program (tbrt.cli.exec)
function modes.exec(plan)
  return require("tbrt.cli.exec").run(plan)
end

function M.main(argv)
  -- An error in a raw luv callback is reported like any other uncaught
  -- error, and ends the process.
  debug.getregistry()[CALLBACK_ERROR_HOOK] = function(msg) fail(msg) end
  uv.run = guarded_run
  local plan, err = M.parse(argv)
  if not plan then
    report(err .. "\n" .. cli.USAGE)
    return 1
  end
  plan.mode = choose_mode(plan)
  return modes[plan.mode](plan)
end

return M
