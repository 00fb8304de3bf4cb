-- tbrt/matrix/hosts/srun.lua - the `srun` launcher: Slurm starts ntasks
-- agents (on `nodes` nodes if given; the file's args go first: partition,
-- --overlap ...). The ranks come from SLURM_PROCID and SLURM_NTASKS;
-- SLURM_CONF and the rest of the environment are the driver's.
local launcher = require("tbrt.matrix.hosts.launcher")

local M = {}

function M.new(decl, env)
  return launcher.new("srun", decl, env, function(d, agent)
    local argv = { d.command or "srun" }
    for _, a in ipairs(d.args or {}) do argv[#argv + 1] = a end
    argv[#argv + 1] = "--ntasks=" .. d.ntasks
    if d.nodes then argv[#argv + 1] = "--nodes=" .. d.nodes end
    argv[#argv + 1] = "--kill-on-bad-exit=0"
    for _, a in ipairs(agent) do argv[#argv + 1] = a end
    return argv
  end)
end

return M
