-- tbrt/matrix/hosts/ssh.lua - the `ssh` launcher: OpenSSH to each host in
-- the list, one master connection per distinct host (ControlMaster, its
-- socket in a private 0700 folder), and every agent started through it:
--   ssh <options> -S <socket> HOST -- TBRT matrix agent --coord ssh:PORT ...
-- An agent dials the coordinator at the address its ssh session came from
-- (SSH_CONNECTION), unless the file names `coordinator` (then the driver
-- listens there and agents dial it). BatchMode: a host that wants a
-- password fails at once, with ssh's words, instead of waiting for one.
local uv = require("luv")
local proc = require("tbrt.matrix.proc")
local hosts = require("tbrt.matrix.hosts")

local M = {}

local Group = setmetatable({}, { __index = hosts.PerRank })
Group.__index = Group

function M.new(decl, env)
  local g = hosts.per_rank("ssh", decl, env)
  g.masters = {}
  return setmetatable(g, Group)
end

-- "user@host:port" -> ssh arguments { "-p", port, "user@host" }
local function target(spec)
  local who, port = spec:match("^(.-):(%d+)$")
  if who and not who:find(":", 1, true) then return { "-p", port, who } end
  return { spec }
end

function Group:ssh_argv(spec, extra)
  local argv = { self.decl.ssh or "ssh", "-o", "BatchMode=yes", "-o",
    "ConnectTimeout=" .. math.ceil(self.decl.connect_timeout or 10), "-o", "ServerAliveInterval=5",
    "-o", "ServerAliveCountMax=3" }
  for _, o in ipairs(self.decl.options or {}) do argv[#argv + 1] = o end
  argv[#argv + 1] = "-S"
  argv[#argv + 1] = self.dir .. "/" .. (self.masters[spec] and self.masters[spec].tag or "x")
  for _, a in ipairs(extra or {}) do argv[#argv + 1] = a end
  for _, a in ipairs(target(spec)) do argv[#argv + 1] = a end
  return argv
end

function Group:setup()
  if not proc.which(self.decl.ssh or "ssh") then return nil, "ssh hosts: the ssh client (openssh-client) is missing" end
  self.dir = assert(uv.fs_mkdtemp("/tmp/tbrt-matrix-ssh-XXXXXX"))
  local n = 0
  for _, spec in ipairs(self.decl.hosts) do
    if not self.masters[spec] then
      n = n + 1
      self.masters[spec] = { tag = "m" .. n }
      local argv = self:ssh_argv(spec, { "-M", "-N", "-o", "ControlPersist=no" })
      local p, err = proc.spawn(argv, { detached = true, name = "ssh master to " .. spec })
      if not p then return nil, err end
      self.masters[spec].proc = p
    end
  end
  -- every master up (its socket answers -O check), bounded
  for spec, m in pairs(self.masters) do
    local deadline = uv.now() / 1000 + (self.decl.connect_timeout or 10) + 5
    while true do
      local r = proc.run(self:ssh_argv(spec, { "-O", "check" }), { timeout = 10 })
      if r and r.code == 0 then break end
      if m.proc.exited or uv.now() / 1000 > deadline then
        local why = m.proc:stderr():gsub("%s+$", "")
        return nil, string.format("ssh hosts: no master connection to %s (%s): %s", spec, m.proc:how(),
          why ~= "" and why or "no answer")
      end
      require("tbrt.task").sleep(0.05)
      uv.update_time()
    end
  end
  return true
end

function Group:coordinator()
  if self.decl.coordinator then return self.decl.coordinator, self.decl.coordinator end
  return "0.0.0.0", "ssh"
end

function Group:describe(rank) return "ssh " .. self.decl.hosts[rank + 1] end

function Group:relaunch(rank)
  local spec = self.decl.hosts[rank + 1]
  local remote = { hosts.tbrt_exe(self.decl) }
  for _, a in ipairs(self.argv_for(rank)) do remote[#remote + 1] = a end
  remote[#remote + 1] = "--token"
  remote[#remote + 1] = "-"                 -- read from stdin: ssh carries it
  local env = {}
  for k, v in pairs(self.decl.env or {}) do env[#env + 1] = k .. "=" .. proc.quote({ v }) end
  table.sort(env)
  local command = (#env > 0 and ("env " .. table.concat(env, " ") .. " ") or "") .. "exec " .. proc.quote(remote)
  local argv = self:ssh_argv(spec, { "-T" })
  argv[#argv + 1] = "--"
  argv[#argv + 1] = command
  return self:start(rank, argv, { stdin = self.env.token .. "\n" })
end

function Group:cleanup()
  for spec, m in pairs(self.masters) do
    if m.proc and not m.proc.exited then
      proc.run(self:ssh_argv(spec, { "-O", "exit" }), { timeout = 5 })
      m.proc:stop(2)
    end
  end
  if self.dir then os.execute("rm -rf " .. proc.quote({ self.dir })) self.dir = nil end
end

function Group:cleanup_now()
  hosts.PerRank.cleanup_now(self)
  for _, m in pairs(self.masters) do
    if m.proc and not m.proc.exited and m.proc.pid then uv.kill(m.proc.pid, "sigterm") end
  end
  if self.dir then os.execute("rm -rf " .. proc.quote({ self.dir })) self.dir = nil end
end

return M
