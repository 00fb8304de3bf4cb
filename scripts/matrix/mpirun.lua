-- mpirun.lua - Open MPI (or MPICH: drop the Open MPI flags) starts the
-- ranks; here 4 on this machine. With a hostfile in args they spread over
-- the cluster. The ranks never call MPI: they meet at tbrt's coordinator.
--   build/tbrt matrix scripts/matrix/mpirun.lua --out /tmp/mpi
return {
  name = "mpirun",
  hosts = { mpirun = { np = 4, args = { "--oversubscribe" } } },   -- as root add "--allow-run-as-root"
  patterns = { "pairwise", "one_to_all" },
  axes = { device = { "soft", "tcp" }, size = { 64, 4096, 65536 } },
  link = { personality = "linux-rc" },
  timeout = 60,
}
