-- local2.lua - the smallest matrix: two tbrt processes on this machine,
-- the tcp link and the soft device (shared memory), three sizes.
--   build/tbrt matrix scripts/matrix/local2.lua --out /tmp/m
return {
  name = "local2",
  hosts = { ["local"] = 2 },
  patterns = { "pairwise" },
  axes = {
    device = { "tcp", "soft" },
    size = { 64, 4096, 65536 },
  },
  link = { personality = "linux-rc" },
  measure = { lat_bytes = 2 ^ 20, bw_bytes = 8 * 2 ^ 20 },
  timeout = 30,
}
