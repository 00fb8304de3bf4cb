-- srun.lua - Slurm starts the ranks (SLURM_PROCID / SLURM_NTASKS): run it
-- inside an allocation (salloc -N 2 -n 4) or where srun may allocate.
--   build/tbrt matrix scripts/matrix/srun.lua --out /tmp/srun
return {
  name = "srun",
  hosts = { srun = { ntasks = 4, args = { "--overlap" } } },
  patterns = { "pairwise", "ring" },
  axes = { device = { "auto" }, size = { 4096, "1M" }, repetitions = 2 },
  timeout = 60,
}
