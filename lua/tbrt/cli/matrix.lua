-- tbrt/cli/matrix.lua - `tbrt matrix`: the subcommand entry of tbrt.matrix
-- (multi-host test matrices). Everything after the word is tbrt.matrix's to
-- parse (it has words of its own: diff, agent), so argparse only collects
-- it; the command then runs as a task on the loop, which it needs for its
-- hosts, agents and timers, and closes what is left on the loop after.
local M = {}

M.name = "matrix"
M.summary = "run a multi-host test matrix from a Lua file; `tbrt matrix --help` says more"
M.usage = "usage: tbrt matrix FILE.lua [--out DIR] [--resume] [--only FILTER] [--dry-run]"

function M.declare(cmd)
  cmd:handle_options(false)
  cmd:argument("words", "the matrix file and its options, or diff A B"):args("*")
end

function M.run(args)
  local uv = require("luv")
  local task = require("tbrt.task")
  local words = args.words or {}
  if args.help then table.insert(words, 1, "--help") end
  local code = task.run(function() return require("tbrt.matrix").main(words) end)
  -- helpers it started may still hold handles: close them, let them finish closing
  uv.walk(function(h) if not h:is_closing() then h:close() end end)
  uv.run("default")
  return code
end

return M
