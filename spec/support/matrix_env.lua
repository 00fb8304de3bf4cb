-- matrix_env.lua - spec helpers for `tbrt matrix`: run a matrix file, read
-- what it left, check pictures, and start the real engines the launcher
-- specs need (an sshd in a namespace, a one-node Slurm with munge), each
-- with files of its own in a temporary folder and stopped at the end.
--
--   local E = require("matrix_env")
--   local why = E.heavy_skip() or E.netns_skip()   -- nil, or why the spec must skip
--   local r, dir = E.run_matrix(text, { "--only", "device=tcp" }, { timeout = 60 })
--   local lines = E.results(dir)
--   assert(E.png_ok(path)) ; assert(E.svg_ok(path))
--   local sshd = assert(E.sshd(2)) ... sshd:stop()
--   local slurm = assert(E.slurm()) ... slurm:stop()
-- Everything that waits runs in a task (H.run and the matrix's own proc).
local uv = require("luv")
local task = require("tbrt.task")
local H = require("helpers")
local proc = require("tbrt.matrix.proc")
local json = require("tbrt.matrix.json")

local E = {}

-- Heavy specs (namespaces, daemons) run under the normal build only.
function E.heavy_skip()
  if os.getenv("TBRT_ASAN") then
    return "heavy matrix spec: runs under the normal build only (TBRT_ASAN is set)"
  end
end

-- nil when this process can make network namespaces, else why not.
function E.netns_skip()
  if not proc.which("ip") then return "no ip command (iproute2)" end
  local name = "tbrtm" .. uv.os_getpid() .. "probe"
  local r = task.run(function() return proc.run({ "ip", "netns", "add", name }, { timeout = 10 }) end)
  if not r or r.code ~= 0 then
    return "cannot make network namespaces here (needs root): " .. ((r and r.stderr) or "ip failed"):gsub("%s+$", "")
  end
  task.run(function() proc.run({ "ip", "netns", "del", name }, { timeout = 10 }) end)
end

-- The namespaces and interfaces a driver of pid left behind (names).
function E.leftovers(pid)
  return task.run(function()
    local out = {}
    local ns = proc.run({ "ip", "netns", "list" }, { timeout = 10 })
    for name in ((ns and ns.stdout) or ""):gmatch("(tbrtm" .. pid .. "h%d+)") do out[#out + 1] = name end
    local links = proc.run({ "ip", "-o", "link", "show" }, { timeout = 10 })
    for name in ((links and links.stdout) or ""):gmatch("%d+: (tbm" .. pid .. "[vp]?%d*)[@:]") do
      out[#out + 1] = name
    end
    return out
  end)
end

-- Write a matrix file into a new folder and run `tbrt matrix` on it.
-- Returns the run (H.run's table), the output folder and the file's path.
function E.run_matrix(text, args, opts)
  opts = opts or {}
  local dir = opts.dir or H.tmpdir()
  -- removed when the test ends, passed or failed: busted's finally is the
  -- spec's (in its environment, where the caller lives), not this module's
  local fin = getfenv(2).finally
  if not opts.dir and type(fin) == "function" then fin(function() H.rmtree(dir) end) end
  local path = dir .. "/" .. (opts.name or "m.lua")
  if text then H.write_file(path, text) end
  local argv = { "matrix", path, "--out", dir .. "/out" }
  for _, a in ipairs(args or {}) do argv[#argv + 1] = a end
  local r = H.run_tbrt(argv, { timeout = opts.timeout or 90, env = opts.env, signal = opts.signal,
    signal_when = opts.signal_when, signal_after = opts.signal_after })
  return r, dir .. "/out", path, dir
end

function E.results(out)
  local list = {}
  local f = assert(io.open(out .. "/results.jsonl"), "no results.jsonl in " .. out)
  for line in f:lines() do list[#list + 1] = json.denull(assert(json.decode(line))) end
  f:close()
  return list
end

function E.of_kind(list, kind)
  local out = {}
  for _, r in ipairs(list) do if r.kind == kind then out[#out + 1] = r end end
  return out
end

-- A PNG: the signature, an IHDR first (width, height > 0) and IEND last.
function E.png_ok(path)
  local s = H.read_file(path)
  if not s then return false, path .. " missing" end
  if s:sub(1, 8) ~= "\137PNG\r\n\26\n" then return false, path .. ": no PNG signature" end
  if s:sub(13, 16) ~= "IHDR" then return false, path .. ": first chunk is not IHDR" end
  local function be32(i) local a, b, c, d = s:byte(i, i + 3) return ((a * 256 + b) * 256 + c) * 256 + d end
  if be32(17) == 0 or be32(21) == 0 then return false, path .. ": zero width or height" end
  if s:sub(-8, -5) ~= "IEND" then return false, path .. ": does not end with IEND" end
  return true
end

-- An SVG: an <svg> root, and every tag closed in order (a small XML check:
-- no DTD, comments and CDATA skipped).
function E.svg_ok(path)
  local s = H.read_file(path)
  if not s then return false, path .. " missing" end
  s = s:gsub("<!%-%-.-%-%->", ""):gsub("<!%[CDATA%[.-%]%]>", ""):gsub("<%?.-%?>", ""):gsub("<!DOCTYPE.->", "")
  local stack, root = {}, nil
  for slash, name, rest in s:gmatch("<(/?)([%w:_%-]+)([^>]*)>") do
    if slash == "/" then
      if stack[#stack] ~= name then return false, path .. ": </" .. name .. "> closes <" .. tostring(stack[#stack]) .. ">" end
      stack[#stack] = nil
    elseif rest:sub(-1) ~= "/" then
      root = root or name
      stack[#stack + 1] = name
    else
      root = root or name
    end
  end
  if root ~= "svg" then return false, path .. ": the root element is " .. tostring(root) end
  if #stack > 0 then return false, path .. ": <" .. stack[#stack] .. "> never closed" end
  return true
end

-- Run start() in a task; if it raises, stop what it started and raise.
function E.guarded(obj, start)
  local ok, a, b = pcall(task.run, start)
  if not ok then
    pcall(obj.stop, obj)
    error(a, 0)
  end
  return a, b
end

local function free_port()
  local t = uv.new_tcp()
  t:bind("127.0.0.1", 0)
  local port = t:getsockname().port
  t:close()
  return port
end

---------------------------------------------------------------------------
-- sshd in network namespaces.

local Sshd = {}
Sshd.__index = Sshd

-- count namespaces, each running a real sshd (openssh-server) on its own
-- address, with host and user keys generated here. Returns the object, or
-- nil and why this machine cannot.
function E.sshd(count)
  if not proc.which("/usr/sbin/sshd") then return nil, "openssh-server is not installed (/usr/sbin/sshd)" end
  if not proc.which("ssh-keygen") then return nil, "ssh-keygen (openssh-client) is not installed" end
  local self = setmetatable({ dir = H.tmpdir(), daemons = {} }, Sshd)
  -- whatever fails half-way, what was started is stopped
  return E.guarded(self, function()
    local netns = require("tbrt.matrix.hosts.netns")
    local net, err = netns.network(count, { tag = "s" })
    if not net then H.rmtree(self.dir) return nil, err end
    self.net = net
    local d = self.dir
    for _, k in ipairs { "host", "user" } do
      local ok, kerr = proc.check({ "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", d .. "/" .. k .. "_key" },
        "ssh-keygen")
      if not ok then self:stop() return nil, kerr end
    end
    H.write_file(d .. "/authorized_keys", H.read_file(d .. "/user_key.pub"))
    uv.fs_chmod(d .. "/authorized_keys", tonumber("600", 8))
    local host_pub = H.read_file(d .. "/host_key.pub"):gsub("%s+$", "")
    local known = {}
    -- privilege separation wants /run/sshd; made if missing (sshd's own need)
    if not uv.fs_stat("/run/sshd") then uv.fs_mkdir("/run/sshd", tonumber("755", 8)) end
    self.hosts = {}
    for i = 1, count do
      local addr = net.addrs[i]
      local conf = d .. "/sshd_config" .. i
      H.write_file(conf, table.concat({
        "Port 22", "ListenAddress " .. addr, "HostKey " .. d .. "/host_key",
        "PidFile " .. d .. "/sshd" .. i .. ".pid", "AuthorizedKeysFile " .. d .. "/authorized_keys",
        "PermitRootLogin prohibit-password", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
        "UsePAM no", "StrictModes no", "LogLevel ERROR", "AcceptEnv TBRT_*", "" }, "\n"))
      local p, perr = proc.spawn({ "ip", "netns", "exec", net.n.ns[i], "/usr/sbin/sshd", "-D", "-e", "-f", conf },
        { detached = true, name = "sshd " .. i })
      if not p then self:stop() return nil, perr end
      self.daemons[i] = p
      known[#known + 1] = addr .. " " .. host_pub
      self.hosts[i] = "root@" .. addr
    end
    H.write_file(d .. "/known_hosts", table.concat(known, "\n") .. "\n")
    self.options = { "-i", d .. "/user_key", "-o", "UserKnownHostsFile=" .. d .. "/known_hosts",
      "-o", "StrictHostKeyChecking=yes", "-o", "IdentitiesOnly=yes", "-F", "/dev/null" }
    -- every sshd answers (bounded)
    for i = 1, count do
      local ok, deadline = false, H.now() + 15
      while not ok and not self.daemons[i].exited and H.now() < deadline do
        local argv = { "ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=2" }
        for _, o in ipairs(self.options) do argv[#argv + 1] = o end
        argv[#argv + 1] = self.hosts[i]
        argv[#argv + 1] = "true"
        local r = proc.run(argv, { timeout = 5 })
        ok = r and r.code == 0
        if not ok then task.sleep(0.1) end
      end
      if not ok or self.daemons[i].exited then
        local why = self.daemons[i]:stderr()
        self:stop()
        return nil, "sshd in a namespace did not answer: " .. why
      end
    end
    return self
  end)
end

function Sshd:stop()
  task.run(function()
    for _, p in pairs(self.daemons) do p:stop(2) end
    if self.net then self.net:remove() end
  end)
  if self.dir then H.rmtree(self.dir) self.dir = nil end
end

---------------------------------------------------------------------------
-- A one-node Slurm: munged, slurmctld and slurmd from Debian, with a
-- generated slurm.conf, every file in a private folder, ports of their own.

local Slurm = {}
Slurm.__index = Slurm

function E.slurm(cpus)
  for _, exe in ipairs { "munged", "mungekey", "slurmctld", "slurmd", "srun", "sinfo" } do
    if not proc.which(exe) and not proc.which("/usr/sbin/" .. exe) then
      return nil, exe .. " is not installed (slurmctld slurmd slurm-client munge)"
    end
  end
  local d = H.tmpdir()
  local self = setmetatable({ dir = d, daemons = {} }, Slurm)
  return E.guarded(self, function()
    for _, sub in ipairs { "munge", "state", "spool" } do uv.fs_mkdir(d .. "/" .. sub, tonumber("700", 8)) end
    -- munged checks that no one else can write where its socket lives
    uv.fs_chmod(d, tonumber("755", 8))
    local ok, err = proc.check({ "mungekey", "-c", "-k", d .. "/munge/munge.key" }, "mungekey")
    if not ok then self:stop() return nil, err end
    local munge = proc.spawn({ "munged", "-F", "-f", "--key-file=" .. d .. "/munge/munge.key",
      "--socket=" .. d .. "/munge/sock", "--pid-file=" .. d .. "/munge/pid", "--log-file=" .. d .. "/munge/log",
      "--seed-file=" .. d .. "/munge/seed" }, { detached = true, name = "munged" })
    self.daemons[#self.daemons + 1] = munge
    if not task.wait(function() return uv.fs_stat(d .. "/munge/sock") or munge.exited end, 10) or munge.exited then
      local why = munge:stderr()
      self:stop()
      return nil, "munged did not start: " .. why
    end
    local host = uv.os_gethostname():match("^[^.]+")
    self.conf = d .. "/slurm.conf"
    H.write_file(self.conf, table.concat({
      "ClusterName=tbrtspec" .. uv.os_getpid(),
      string.format("SlurmctldHost=%s(127.0.0.1)", host),
      "SlurmctldPort=" .. free_port(), "SlurmdPort=" .. free_port(),
      "SlurmUser=root", "SlurmdUser=root",
      "AuthType=auth/munge", "CredType=cred/munge", "AuthInfo=socket=" .. d .. "/munge/sock",
      "StateSaveLocation=" .. d .. "/state", "SlurmdSpoolDir=" .. d .. "/spool",
      "SlurmctldPidFile=" .. d .. "/slurmctld.pid", "SlurmdPidFile=" .. d .. "/slurmd.pid",
      "SlurmctldLogFile=" .. d .. "/slurmctld.log", "SlurmdLogFile=" .. d .. "/slurmd.log",
      "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
      "AccountingStorageType=accounting_storage/none", "SelectType=select/cons_tres",
      "SelectTypeParameters=CR_Core", "MpiDefault=none", "ReturnToService=2",
      "SlurmdParameters=config_overrides",
      string.format("NodeName=%s NodeAddr=127.0.0.1 CPUs=%d State=UNKNOWN", host, cpus or 4),
      string.format("PartitionName=spec Nodes=%s Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES", host),
      "" }, "\n"))
    self.env = { SLURM_CONF = self.conf }
    for _, exe in ipairs { "slurmctld", "slurmd" } do
      local p, perr = proc.spawn({ exe, "-D", "-f", self.conf }, { detached = true, name = exe, env = self.env })
      if not p then self:stop() return nil, perr end
      self.daemons[#self.daemons + 1] = p
    end
    local up, deadline = false, H.now() + 30
    local function any_exited()
      for _, p in ipairs(self.daemons) do if p.exited then return true end end
    end
    while not up and not any_exited() and H.now() < deadline do
      local r = proc.run({ "sinfo", "-h", "-o", "%T" }, { timeout = 5, env = self.env })
      up = r and r.code == 0 and r.stdout:match("idle") ~= nil
      if not up then task.sleep(0.2) end
    end
    for _, p in ipairs(self.daemons) do
      if p.exited then
        local why = p.name .. " " .. p:how() .. ": " .. p:stderr() .. (H.read_file(d .. "/" .. p.name .. ".log") or "")
        self:stop()
        return nil, why:sub(1, 600)
      end
    end
    if not up then self:stop() return nil, "slurm's node did not become idle within 30 s" end
    return self
  end)
end

function Slurm:stop()
  task.run(function()
    for i = #self.daemons, 1, -1 do self.daemons[i]:stop(3) end
  end)
  if self.dir then H.rmtree(self.dir) self.dir = nil end
end

return E
