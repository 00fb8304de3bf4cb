-- tbrt/matrix/hosts/mpirun.lua - the `mpirun` launcher: Open MPI's or
-- MPICH's mpirun starts np agents (the file's args go first: hostfile,
-- --oversubscribe, --allow-run-as-root ...). The agents never call MPI:
-- mpirun only places and starts them, and they rendezvous over the
-- coordinator.
local launcher = require("tbrt.matrix.hosts.launcher")

local M = {}

function M.new(decl, env)
  return launcher.new("mpirun", decl, env, function(d, agent)
    local argv = { d.command or "mpirun" }
    for _, a in ipairs(d.args or {}) do argv[#argv + 1] = a end
    argv[#argv + 1] = "-np"
    argv[#argv + 1] = tostring(d.np)
    for _, a in ipairs(agent) do argv[#argv + 1] = a end
    return argv
  end)
end

return M
