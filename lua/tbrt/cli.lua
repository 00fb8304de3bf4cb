-- tbrt/cli.lua - the tbrt command line: its options (lua-argparse) and its
-- subcommands (`tbrt devices`). tbrt.main asks parse() for a plan and runs
-- it.
--
--   tbrt [options] [script [args...]]
--   tbrt COMMAND [command options]
--
-- Options stop at the script: everything after its name is the script's,
-- untouched (`tbrt s.lua -v` passes -v to s.lua), as luajit does. So only
-- the words before the script go through argparse; options are declared
-- once, as data, and both the split and the parser are built from them.
--
-- Subcommands are a table: COMMANDS names modules tbrt.cli.<name>, each
-- { name, summary, usage, declare(argparse_command), run(args) -> exit
-- code }. A command is one only as the very first argument; a script file
-- of that name runs as `tbrt ./devices` or `tbrt -- devices`.
local argparse = require("argparse")

local M = {}

-- The subcommands, in the order --help lists them. (`tbrt exec` is apart:
-- everything after its options is the program's, see tbrt.cli.exec.)
M.COMMANDS = { "devices", "matrix" }

local function command(name)
  for _, c in ipairs(M.COMMANDS) do
    if c == name then return require("tbrt.cli." .. name) end
  end
end
M.command = command

local usage = { "usage: tbrt [options] [script [args...]]" }
for _, name in ipairs(M.COMMANDS) do
  usage[#usage + 1] = "       " .. command(name).usage:gsub("^usage: ", "")
end
usage[#usage + 1] = "       tbrt exec [options] -- PROGRAM [ARGS...]"
M.USAGE = table.concat(usage, "\n")

local DESCRIPTION = "Lua-scriptable RDMA transport runtime. Runs a script as a task on " ..
  "one libuv loop, or an interactive REPL on it."

local EPILOG = [[
With no script and no -e: the REPL when stdin is a terminal, otherwise
stdin is read a line at a time and each complete chunk is run (values of
expressions are printed; exit code 1 if any chunk failed). A script named
"-" is read whole from stdin. A script file named "devices" runs as
`tbrt ./devices`. -l NAME sets the global NAME (the last part of a dotted
name: -l tbrt.verbs sets verbs; -l G=NAME sets G). Scripts and -e find the
library loaded as the global tbrt. History: $TBRT_HISTORY, else
~/.tbrt_history.]]

-- The options, in the order --help lists them. value: the option takes
-- one (as "-e CODE" or "-eCODE"); kind: it is kept in plan.pre, in the
-- order given, with the other kinds.
M.OPTIONS = {
  { "-e", value = "CODE", kind = "e", help = "run CODE before the script (may repeat)" },
  { "-l", value = "NAME", kind = "l", help = "require module NAME into the global NAME before the script (may repeat)" },
  { "-j", value = "CMD", kind = "j",
    help = "LuaJIT's -j: -jv[=FILE] traces (jit.v), -jp[=OPTS[,FILE]] profile (jit.p), " ..
      "-jdump[=OPTS[,FILE]], -joff, -jon, -jflush" },
  { "-i", target = "interactive", help = "after the script and -e, start the REPL with their globals" },
  { "-v --version", target = "version", help = "print the versions and exit" },
  { "-h --help", target = "help", help = "print this help and exit" },
  { "--", help = "stop handling options (the next word is the script)", doc_only = true },
  { "-", help = "as the script: read it whole from stdin", doc_only = true },
}

local TAKES_VALUE = {}
for _, o in ipairs(M.OPTIONS) do
  if o.value then TAKES_VALUE[o[1]:sub(2, 2)] = true end
end

local function build()
  local p = argparse("tbrt", DESCRIPTION)
    :usage(M.USAGE):epilog(EPILOG):add_help(false):require_command(false)
    :command_target("command")
  for _, o in ipairs(M.OPTIONS) do
    if o.value then
      local kind = o.kind
      p:option(o[1], o.help):argname(o.value):count("*"):target("pre"):init({})
        :action(function(result, _, value)
          result.pre[#result.pre + 1] = { kind = kind, value = value }
        end)
    elseif not o.doc_only then
      p:flag(o[1], o.help):target(o.target)
    end
  end
  local cmds = {}
  for _, name in ipairs(M.COMMANDS) do
    local c = command(name)
    local cmd = p:command(name, c.summary):usage(c.usage):add_help(false)
    c.declare(cmd)
    cmd:flag("-h --help", "print this help and exit")
    cmds[name] = cmd
  end
  return p, cmds
end

-- The help text (argparse's, with the words about -- and - that are not
-- argparse options); help(NAME): the subcommand's.
function M.help(name)
  local p, cmds = build()
  if name then return cmds[name]:get_help() end
  local extra = {}
  for _, o in ipairs(M.OPTIONS) do
    if o.doc_only then extra[#extra + 1] = string.format("   %-21s %s", o[1], o.help) end
  end
  return (p:get_help():gsub("(\nOptions:\n.-\n)(\n)", function(opts, nl)
    return opts .. table.concat(extra, "\n") .. "\n" .. nl
  end, 1))
end

-- The words before the script: where the script is, and the options as
-- argparse should see them (a value glued to its option, so a value that
-- starts with "-" stays a value: "-e" "-1" -> "-e-1").
local function split(argv, n)
  local words, i = {}, 1
  while i <= n do
    local a = argv[i]
    if a == "--" then return words, i + 1 end
    if a == "-" or a:sub(1, 1) ~= "-" then return words, i end
    if a:sub(1, 2) ~= "--" then
      for j = 2, #a do
        if TAKES_VALUE[a:sub(j, j)] then
          if j == #a and i < n and argv[i + 1] ~= "" then
            a = a .. argv[i + 1]
            i = i + 1
          elseif j == #a and i < n then
            words[#words + 1] = a
            a = argv[i + 1]
            i = i + 1
          end
          break
        end
      end
    end
    words[#words + 1] = a
    i = i + 1
  end
  return words, i
end

-- argv: [0] the program, [1..argv.n] its arguments. Returns the plan:
--   pre = { {kind = "e" | "l" | "j", value} ... } in order; script (nil, "-" or
--   a path) at argv[script_index]; interactive, help, version; or
--   command = NAME with args (what argparse made of the rest) and help.
-- Or nil and a message for a bad command line.
function M.parse(argv)
  local n = argv.n or #argv
  local p = build()
  if argv[1] == "exec" then return require("tbrt.cli.exec").parse(argv) end
  if command(argv[1]) then
    local ok, r = p:pparse({ unpack(argv, 1, n) })
    if not ok then return nil, r end
    return { argv = argv, command = argv[1], args = r, help = r.help, pre = {} }
  end
  local words, at = split(argv, n)
  local ok, r = p:pparse(words)
  if not ok then return nil, r end
  return { argv = argv, pre = r.pre or {}, interactive = r.interactive, help = r.help,
    version = r.version, script_index = at, script = at <= n and argv[at] or nil }
end

-- Run a subcommand's plan: its exit code (an error it raises is reported
-- by the caller).
function M.run(plan)
  if plan.help then
    print(M.help(plan.command))
    return 0
  end
  return command(plan.command).run(plan.args) or 0
end

-- `tbrt devices [-v]` as a function (the REPL's devices() helper).
function M.devices(verbose, write)
  local args = type(verbose) == "table" and verbose or { verbose = verbose }
  return command("devices").run(args, write)
end

return M
