-- tbrt/matrix/hosts/launcher.lua - the base of the job launchers (mpirun,
-- srun): one command starts every rank, each rank learns its number from
-- the launcher's environment (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK,
-- SLURM_PROCID) and dials the coordinator. One process for all ranks: a
-- rank that dies cannot be started alone again, so its host is gone for
-- the rest of the run; stopping the job stops the ranks.
--
-- The coordinator listens on the file's `coordinator` address, else on
-- the address this host's name resolves to (the ranks on other nodes
-- must reach it; on one node that may well be 127.0.0.1).
local uv = require("luv")
local proc = require("tbrt.matrix.proc")
local hosts = require("tbrt.matrix.hosts")

local M = {}

local Group = {}
Group.__index = Group
M.Group = Group

function M.new(kind, decl, env, command_of)
  return setmetatable({ kind = kind, decl = decl, env = env, count = decl.count,
    command_of = command_of }, Group)
end

function Group:setup()
  local exe = self.decl.command or self.kind
  if not proc.which(exe) then
    return nil, string.format("%s hosts: %s is not installed (or not on PATH)", self.kind, exe)
  end
  return true
end

function Group:coordinator()
  local addr = self.decl.coordinator
  if not addr then
    local ai = uv.getaddrinfo(uv.os_gethostname(), nil, { family = "inet", socktype = "stream" })
    addr = ai and ai[1] and ai[1].addr or "127.0.0.1"
  end
  return addr, addr
end

function Group:describe(rank)
  return string.format("%s rank %d", self.kind, rank)
end

function Group:launch(argv_for)
  local agent = { hosts.tbrt_exe(self.decl) }
  for _, a in ipairs(argv_for(nil)) do agent[#agent + 1] = a end
  local argv = self.command_of(self.decl, agent)
  local log = self.env.logdir and io.open(self.env.logdir .. "/" .. self.kind .. ".log", "a")
  self.log = log
  local env = { TBRT_MATRIX_TOKEN = self.env.token }
  for k, v in pairs(self.decl.env or {}) do env[k] = v end
  local p, err = proc.spawn(argv, { detached = true, log = log, env = env, name = self.kind })
  if not p then return nil, err end
  self.proc = p
  return true
end

function Group:relaunch()
  return nil, string.format("a %s job cannot start one rank again", self.kind)
end

function Group:exited()
  local p = self.proc
  if p and p.exited then
    local text = p:stderr():gsub("%s+$", "")
    local lines = {}
    for line in text:gmatch("[^\n]+") do lines[#lines + 1] = line end
    local words = table.concat(lines, " | ", math.max(1, #lines - 2))
    return string.format("%s ended (%s)%s", self.kind, p:how(), words ~= "" and (": " .. words) or "")
  end
end

function Group:stop()
  if self.proc and not self.proc.exited then
    -- the agents leave on the coordinator's bye; the job then ends by itself
    if not require("tbrt.task").wait(function() return self.proc.exited end, 5) then
      self.proc:stop(3)
    end
  end
  if self.log then self.log:close() self.log = nil end
end

function Group:cleanup() end

function Group:cleanup_now()
  if self.proc and not self.proc.exited and self.proc.pid then uv.kill(self.proc.pid, "sigterm") end
end

return M
