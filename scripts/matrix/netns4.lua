-- netns4.lua - four hosts in network namespaces on this machine (root):
-- every pair, then the ordered and a random ring, over the tcp link and
-- the soft device, three sizes. Soft cells need the soft device's UDP
-- wire between namespaces; until it is there they fail with its reason.
--   sudo build/tbrt matrix scripts/matrix/netns4.lua --out /tmp/netns4
return {
  name = "netns4",
  hosts = { netns = 4 },
  patterns = { "pairwise", "ring", { "ring", order = "random" } },
  axes = {
    device = { "tcp", "soft" },
    size = { 64, 4096, 65536 },
  },
  link = { personality = "linux-rc" },
  measure = { lat_bytes = 2 ^ 20, bw_bytes = 8 * 2 ^ 20 },
  timeout = 30,
}
