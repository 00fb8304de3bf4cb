-- bench4.lua - the matrix `make bench` times: 4 hosts in network
-- namespaces, every pair, 3 sizes x 2 devices. The figure is the driver's
-- own overhead per cell (set-up and teardown around the measurements).
-- Soft cells need the soft device's UDP wire between namespaces; until it
-- exists they fail at link set-up, which still costs the driver its part.
return {
  name = "bench4",
  hosts = { netns = 4 },
  patterns = { "pairwise" },
  axes = { device = { "tcp", "soft" }, size = { 64, 4096, 65536 } },
  link = { personality = "linux-rc" },
  measure = { lat_bytes = 2 ^ 20, bw_bytes = 8 * 2 ^ 20 },
  timeout = 60,
}
