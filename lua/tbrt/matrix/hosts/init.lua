-- tbrt/matrix/hosts/init.lua - the launchers: how a matrix's hosts are
-- reached and how an agent (`tbrt matrix agent`) is started on each. One
-- module per launcher (netns, local, ssh, mpirun, srun), each making a
-- group with the same face:
--
--   group.kind, group.count
--   group:setup()                 make the hosts (namespaces) or connections
--   group:coordinator()           -> listen_host, agent_host: where the
--                                    coordinator listens, and the HOST part
--                                    of the --coord an agent is given
--   group:launch(argv_for)        start every agent; argv_for(rank|nil) is
--                                    the agent's command line after tbrt; the
--                                    run's token goes in TBRT_MATRIX_TOKEN (or
--                                    on stdin), never on a command line
--   group:relaunch(rank)          start one agent again (or nil, why not)
--   group:exited(rank)            nil while its process runs, else how it ended
--   group:describe(rank)          where rank runs, in words
--   group:stop()                  stop every agent (TERM, then KILL)
--   group:cleanup()               remove what setup made; safe to call twice
--   group:cleanup_now()           the same without waiting on the loop
--                                    (from an exit path), best effort
--
-- Agents' stderr goes to one log file per rank in the run's logs folder,
-- and its last lines into the reason when an agent dies.
local uv = require("luv")
local proc = require("tbrt.matrix.proc")

local M = {}

M.KINDS = { netns = true, ["local"] = true, ssh = true, mpirun = true, srun = true }

-- The tbrt program agents run (this one unless the file names another).
function M.tbrt_exe(decl)
  return decl.tbrt or uv.exepath()
end

-- A base for launchers that start one process per rank.
local PerRank = {}
PerRank.__index = PerRank
M.PerRank = PerRank

function M.per_rank(kind, decl, env)
  return setmetatable({ kind = kind, decl = decl, env = env, count = decl.count, procs = {},
    logs = {} }, PerRank)
end

function PerRank:log_file(rank)
  if not self.env.logdir then return nil end
  local f = self.logs[rank]
  if not f then
    f = io.open(string.format("%s/rank%d.log", self.env.logdir, rank), "a")
    self.logs[rank] = f
  end
  return f
end

-- Start argv (a list) as rank's agent process.
function PerRank:start(rank, argv, opts)
  opts = opts or {}
  local old = self.procs[rank]
  if old and not old.exited then old:stop(1) end
  local log = self:log_file(rank)
  local env = { TBRT_MATRIX_TOKEN = self.env.token }
  for k, v in pairs(opts.env or {}) do env[k] = v end
  local p, err = proc.spawn(argv, { detached = true, log = log, env = env, stdin = opts.stdin,
    name = string.format("rank %d agent", rank) })
  if not p then return nil, err end
  self.procs[rank] = p
  return true
end

function PerRank:launch(argv_for)
  self.argv_for = argv_for
  for r = 0, self.count - 1 do
    local ok, err = self:relaunch(r)
    if not ok then return nil, err end
  end
  return true
end

-- The last lines an agent wrote (for the reason of its death).
function PerRank:last_words(rank)
  local p = self.procs[rank]
  if not p then return "" end
  local text = p:stderr():gsub("%s+$", "")
  local lines = {}
  for line in text:gmatch("[^\n]+") do lines[#lines + 1] = line end
  return table.concat(lines, " | ", math.max(1, #lines - 2))
end

function PerRank:exited(rank)
  local p = self.procs[rank]
  if p and p.exited then
    local words = self:last_words(rank)
    return p:how() .. (words ~= "" and (": " .. words) or "")
  end
end

function PerRank:stop()
  for _, p in pairs(self.procs) do p:kill("sigterm") end
  for _, p in pairs(self.procs) do p:stop(2) end
  for _, f in pairs(self.logs) do f:close() end
  self.logs = {}
end

function PerRank:cleanup() end
function PerRank:cleanup_now()
  for _, p in pairs(self.procs) do if not p.exited and p.pid then uv.kill(p.pid, "sigkill") end end
end

function M.new(decl, env)
  local mod = require("tbrt.matrix.hosts." .. decl.kind)
  return mod.new(decl, env)
end

return M
