-- tbrt/matrix/init.lua - `tbrt matrix`: multi-host test matrices.
--
--   tbrt matrix FILE.lua [--out DIR] [--resume] [--only FILTER] [--dry-run]
--   tbrt matrix diff A B [--sigmas K] [--threshold PCT]
--   tbrt matrix agent --coord HOST:PORT [--rank N] [--token -]   (what launchers start;
--                                   the run's token from TBRT_MATRIX_TOKEN, or stdin)
--
-- The pieces, in the order a run uses them:
--   file.lua       load and check the matrix file (options declared as data)
--   cells.lua      the product of the axes, filters, --only, cell keys
--   patterns.lua   pairwise / ring / bisection / one_to_all as rounds of pairs
--   hosts/*.lua    netns, local, ssh, mpirun, srun: make hosts, start agents
--   coord.lua      the TCP coordinator the agents dial (msg.lua: bounded frames)
--   agent.lua      one rank: links between agents, steps (step.lua), scenarios
--   run.lua        scheduling, timeouts, hosts that vanish, stop and --resume
--   progress.lua   the live bar or plain lines
--   results.lua    results.jsonl and results.csv; summary.lua summary.txt;
--   plot.lua       gnuplot PNG/SVG; diff.lua  comparing two runs
-- A word first ("diff", "agent") picks the command; a matrix file named so
-- runs as ./diff.
local uv = require("luv")
local argparse = require("argparse")

local M = {}

M.USAGE = "usage: tbrt matrix FILE.lua [--out DIR] [--resume] [--only FILTER] [--dry-run]\n" ..
  "       tbrt matrix diff A B [--sigmas K] [--threshold PCT]"

local function parser()
  local p = argparse("tbrt matrix", "Run a matrix of link tests across hosts (a Lua file says which " ..
    "hosts, patterns and axes), with live progress; results, tables and plots go to one folder.")
    :usage(M.USAGE):add_help(false)
  p:argument("file", "The matrix file (scripts/matrix/*.lua has examples).")
  p:option("--out", "Output folder (default: matrix-NAME-DATE-TIME here)."):argname("DIR")
  p:flag("--resume", "Continue the results already in --out: run only the cells not done.")
  p:option("--only", "Only the cells matching name=value[|value...][,name=value...], " ..
    "e.g. device=tcp,size=4K|64K."):argname("FILTER")
  p:flag("--dry-run", "List the hosts and the cells, start nothing.")
  p:flag("-h --help", "Print this help and exit.")
  p:epilog("Results: DIR/results.jsonl (a line per measurement), results.csv, summary.txt, " ..
    "plots/*.png and *.svg. Exit code 0 when every cell passed, 3 when some failed or were " ..
    "skipped, 130 when stopped (Ctrl-C: what finished is kept, --resume continues), 1 when " ..
    "the matrix could not run, 2 for a bad command line or file.")
  return p
end

local function diff_parser()
  local p = argparse("tbrt matrix diff", "List the cells of two result folders whose figures " ..
    "moved by more than the noise of their repetitions."):add_help(false)
    :usage("usage: tbrt matrix diff A B [--sigmas K] [--threshold PCT]")
  p:argument("a", "The first result folder (before).")
  p:argument("b", "The second (after).")
  p:option("--sigmas", "How many standard errors make a move.", "3"):convert(tonumber)
  p:option("--threshold", "Percent change that counts without repetitions.", "10"):convert(tonumber)
  p:flag("-h --help", "Print this help and exit.")
  return p
end

local function agent_parser()
  local p = argparse("tbrt matrix agent", "One rank of a matrix (started by the launchers).")
    :add_help(false)
  p:option("--coord", "The coordinator: HOST:PORT, or ssh:PORT (the ssh client's address)."):count(1)
  p:option("--token", "- : read the run's token from stdin (else TBRT_MATRIX_TOKEN)."):choices({ "-" })
  p:option("--rank", "This rank (else from the launcher's environment)."):convert(tonumber)
  return p
end

local function die(code, msg)
  io.stdout:flush()
  io.stderr:write("tbrt matrix: ", msg, "\n")
  io.stderr:flush()
  return code
end

-- What --dry-run prints.
function M.dry_run(spec, list, total)
  local patterns = require("tbrt.matrix.patterns")
  local n = spec.hosts.count
  print(string.format("matrix %s (%s): %s launcher, %d hosts", spec.name, spec.path, spec.hosts.kind, n))
  for _, p in ipairs(spec.patterns) do
    if p.kind == "scenario" then
      print(string.format("  pattern %s: a scenario on every host", p.label))
    else
      local ok, rounds = pcall(patterns.rounds, p, n, 1, spec.seed)
      if ok then
        local pairs_n = 0
        for _, r in ipairs(rounds) do pairs_n = pairs_n + #r end
        print(string.format("  pattern %s: %d round%s, %d pairs", p.label, #rounds, #rounds == 1 and "" or "s", pairs_n))
      else
        print(string.format("  pattern %s: %s", p.label, tostring(rounds)))
      end
    end
  end
  for _, k in ipairs(require("tbrt.matrix.file").unknown_link_options(spec)) do
    print(string.format("  warning: %s is not a link option of this tbrt", k))
  end
  print(string.format("%d cells%s:", #list, total ~= #list and string.format(" (of %d before --only)", total) or ""))
  for _, c in ipairs(list) do print(string.format("  %4d  %s  (timeout %g s)", c.index, c.key, c.timeout)) end
  return 0
end

function M.run_file(args)
  local file = require("tbrt.matrix.file")
  local cells = require("tbrt.matrix.cells")
  local spec, err = file.load(args.file)
  if not spec then return die(2, err) end
  local only
  if args.only then
    only, err = cells.parse_only(args.only)
    if not only then return die(2, err) end
  end
  if args.dry_run then
    local list, lerr = cells.expand(spec, only)
    if not list then return die(2, lerr) end
    local all = cells.expand(spec, nil) or list
    return M.dry_run(spec, list, #all)
  end
  local run = require("tbrt.matrix.run").new(spec, { out = args.out, resume = args.resume, only = only })
  local signals = {}
  for _, name in ipairs { "sigint", "sigterm", "sighup" } do
    local s = uv.new_signal()
    s:start(name, function() run:stop(name:upper()) end)
    signals[#signals + 1] = s
  end
  local code, rerr = run:execute()
  for _, s in ipairs(signals) do s:close() end
  if not code then return die(1, rerr) end
  return code
end

-- argv: the words after `matrix`. Returns an exit code.
function M.main(argv)
  local first = argv[1]
  if first == "diff" then
    local p = diff_parser()
    local ok, a = p:pparse({ unpack(argv, 2) })
    if not ok then return die(2, a .. "\n" .. p:get_usage()) end
    if a.help then print(p:get_help()) return 0 end
    local code, err = require("tbrt.matrix.diff").main(a.a, a.b, { sigmas = a.sigmas,
      threshold = a.threshold and a.threshold / 100 })
    if not code then return die(2, err) end
    return code
  elseif first == "agent" then
    local ok, a = agent_parser():pparse({ unpack(argv, 2) })
    if not ok then return die(2, a) end
    local token = os.getenv("TBRT_MATRIX_TOKEN")
    if a.token == "-" then token = (io.stdin:read("*l") or ""):sub(1, 128) end
    if not token or not token:match("^%x+$") then
      return die(2, "matrix agent: no run token (TBRT_MATRIX_TOKEN, or --token - and a line on stdin)")
    end
    return require("tbrt.matrix.agent").run({ coord = a.coord, token = token, rank = a.rank })
  end
  local p = parser()
  for _, w in ipairs(argv) do
    if w == "-h" or w == "--help" then print(p:get_help()) return 0 end
  end
  local ok, a = p:pparse(argv)
  if not ok then return die(2, a .. "\n" .. M.USAGE) end
  return M.run_file(a)
end

return M
