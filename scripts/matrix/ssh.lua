-- ssh.lua - a matrix over ssh: name your hosts (tbrt must be installed on
-- each, at the same path as here or at `tbrt`). One master connection per
-- host; agents dial back to this machine at the address their ssh session
-- came from (or set coordinator = "ADDRESS" when that is not reachable).
--   build/tbrt matrix scripts/matrix/ssh.lua --dry-run
return {
  name = "ssh",
  hosts = { ssh = { "node1", "node2", "admin@node3:2222", "node4",
    options = { "-o", "StrictHostKeyChecking=accept-new" }, tbrt = "/usr/local/bin/tbrt" } },
  patterns = { "pairwise", { "ring", order = "random" }, "bisection" },
  axes = { device = { "auto", "tcp" }, size = { 8, 4096, 65536, "1M", "4M" }, repetitions = 3 },
  timeout = 120,
}
