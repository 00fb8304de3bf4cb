-- tbrt/matrix/hosts/mpirun.lua - the `mpirun` launcher: Open MPI's or
-- MPICH's mpirun starts np agents (the file's args go first: hostfile,
-- --oversubscribe, --allow-run-as-root ...). The agents never call MPI:
-- mpirun only places and starts them, and they rendezvous over the
-- coordinator.
local launcher = require("tbrt.matrix.hosts.launcher")
local proc = require("tbrt.matrix.proc")

local M = {}

-- Open MPI passes only the environment it is told to (-x NAME); MPICH's
-- hydra passes all of it.
local function open_mpi(command)
  local r = proc.run({ command, "--version" }, { timeout = 10 })
  return r and (r.stdout .. r.stderr):find("Open MPI", 1, true) ~= nil
end

function M.new(decl, env)
  return launcher.new("mpirun", decl, env, function(d, agent)
    local argv = { d.command or "mpirun" }
    for _, a in ipairs(d.args or {}) do argv[#argv + 1] = a end
    if open_mpi(argv[1]) then
      argv[#argv + 1] = "-x"
      argv[#argv + 1] = "TBRT_MATRIX_TOKEN"
    end
    argv[#argv + 1] = "-np"
    argv[#argv + 1] = tostring(d.np)
    for _, a in ipairs(agent) do argv[#argv + 1] = a end
    return argv
  end)
end

return M
