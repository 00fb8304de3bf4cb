-- tbrt/matrix/hosts/local.lua - the `local` launcher: every host is a
-- tbrt process on this machine (127.0.0.1). The soft device's shared-memory
-- wire reaches between them, so soft cells run here today.
local hosts = require("tbrt.matrix.hosts")

local M = {}

local Group = setmetatable({}, { __index = hosts.PerRank })
Group.__index = Group

function M.new(decl, env)
  local g = hosts.per_rank("local", decl, env)
  return setmetatable(g, Group)
end

function Group:setup() return true end
function Group:coordinator() return "127.0.0.1", "127.0.0.1" end
function Group:describe(rank) return string.format("local process %d", rank) end

function Group:relaunch(rank)
  local argv = { hosts.tbrt_exe(self.decl) }
  for _, a in ipairs(self.argv_for(rank)) do argv[#argv + 1] = a end
  return self:start(rank, argv)
end

return M
