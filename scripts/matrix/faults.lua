-- faults.lua - how drops hurt RC over the soft device's UDP wire: two
-- namespaces, 0%, 0.1% and 1% drop, every byte still checked. Needs root,
-- the UDP wire and fault injection (cells say which is missing).
--   sudo build/tbrt matrix scripts/matrix/faults.lua --out /tmp/faults
return {
  name = "faults",
  hosts = { netns = 2 },
  patterns = { "pairwise" },
  axes = { size = { 4096, 65536, "1M" }, faults = { drop = { 0, 0.001, 0.01 } }, repetitions = 3 },
  link = { device = "soft", personality = "linux-rc", qp_type = "RC", wire = "udp" },
  timeout = 60,
}
