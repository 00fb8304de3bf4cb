-- matrix_srun_spec.lua - the srun launcher with a real one-node Slurm: the
-- spec starts munged, slurmctld and slurmd (Debian's) from a slurm.conf it
-- writes, and the matrix's ranks are Slurm tasks (SLURM_PROCID,
-- SLURM_NTASKS). 2 and 4 tasks. Heavy: the normal build only.
local H = require("helpers")
local E = require("matrix_env")

describe("tbrt matrix under srun", function()
  local slurm, why
  setup(function()
    why = E.heavy_skip()
    if not why then slurm, why = E.slurm(4) end
  end)
  teardown(function() if slurm then slurm:stop() end end)

  for _, ntasks in ipairs { 2, 4 } do
    it("runs " .. ntasks .. " Slurm tasks pairwise and one_to_all", function()
      if not slurm then return pending(why) end
      local text = string.format([[return {
  name = "srun%d",
  hosts = { srun = { ntasks = %d } },
  patterns = { "pairwise", "one_to_all" },
  axes = { device = { "tcp" }, size = { 4096 } },
  measure = { lat_bytes = 2 ^ 18, bw_bytes = 2 ^ 21 },
  timeout = 30,
}]], ntasks, ntasks)
      local r, out, _, dir = E.run_matrix(text, {}, { timeout = 120, env = slurm.env })
      assert.equal(0, r.code, H.describe(r))
      local list = E.results(out)
      local run = E.of_kind(list, "run")[1]
      assert.equal(ntasks, #run.hosts)
      for i, h in ipairs(run.hosts) do
        assert.equal(i - 1, h.rank)
        assert.equal("slurm", h.rank_from)
      end
      for _, c in ipairs(E.of_kind(list, "cell")) do assert.equal("ok", c.status, c.cell) end
      local n = #E.of_kind(list, "measurement")
      assert.equal(ntasks * (ntasks - 1) / 2 + (ntasks - 1), n)
      H.rmtree(dir)
    end)
  end
end)
