-- verbs_ucx_spec.lua - UCX (Debian's ucx-utils, unmodified) on tbrt's
-- libibverbs: ucx_perftest between two processes over ud_verbs, and over
-- rc_verbs (its receives on a shared receive queue; ud_verbs beside it,
-- as UCX needs a transport that can wire an RC endpoint up).
--
-- What UCX needs that a library without a kernel cannot give: it skips
-- every device without a character device at /dev/infiniband/<dev_name>
-- (uct_ib_device_is_accessible: stat S_ISCHR and access R|W). The spec makes
-- one where nothing else sees it: a private mount namespace (unshare -m)
-- with an overlay on /dev holding infiniband/uverbs0 (a node like /dev/null,
-- 1:3) and a fresh tmpfs on /dev/shm for the soft fabric; it all goes with
-- the namespace. That takes root: without it the spec skips, saying so.
-- Besides that character device, UCX needs nothing a library can't give:
-- ud_verbs asks for UCX_IB_TX_MIN_SGE + 1 = 6 send SGEs (the device has 30),
-- rc_verbs an SRQ, and ud_verbs reads the RoCE packet type from wc.sl as
-- mlx5 reports it (where the GRH's destination address is).
local H = require("helpers")
local X = require("programs")

local function sh(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("*a")
  local ok, _, code = p:close()
  return out, ok and 0 or code
end

local function why_not()
  if os.getenv("TBRT_ASAN") then return "runs under the normal build only (UCX is heavy)" end
  if not X.have("ucx_perftest") then return "ucx_perftest not installed (ucx-utils)" end
  if sh("id -u"):match("^(%d+)") ~= "0" then
    return "needs root: a private mount namespace with /dev/infiniband/uverbs0 for UCX"
  end
  if not X.have("unshare") then return "unshare (util-linux) not installed" end
  return nil
end

local function shell_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- Run script (sh) in a private mount namespace where UCX sees softib0.
local function in_namespace(dir, script, timeout)
  local setup = table.concat({
    "mount -t overlay overlay -o lowerdir=/dev,upperdir=" .. dir .. "/upper,workdir=" .. dir ..
      "/work /dev || exit 90",
    "mount -t tmpfs tmpfs /dev/shm || exit 91",
    script }, "\n")
  return H.run("/usr/bin/unshare", { "-m", "--propagation", "private", "sh", "-c", setup },
    { timeout = timeout or 60 })
end

describe("UCX on tbrt's libibverbs", function()
  local reason = why_not()
  if reason then
    it("ucx_perftest over ud_verbs", function() pending(reason) end)
    return
  end
  local dir
  setup(function()
    dir = H.tmpdir()
    local out, code = sh("mkdir -p " .. dir .. "/upper/infiniband " .. dir .. "/work && mknod " ..
      dir .. "/upper/infiniband/uverbs0 c 1 3")
    assert(code == 0, out)
  end)
  teardown(function() H.rmtree(dir) end)

  -- Can this machine make the namespace (a container may refuse unshare or
  -- an overlay on /dev)? nil, or why not.
  local probed, cannot
  local function namespace_refused()
    if not probed then
      probed = true
      local r = in_namespace(dir, "test -c /dev/infiniband/uverbs0", 20)
      if r.code ~= 0 then
        cannot = "cannot make the private mount namespace UCX needs here (unshare -m, an overlay " ..
          "on /dev): " .. (r.stderr ~= "" and r.stderr:gsub("%s+$", "") or ("exit " .. tostring(r.code)))
      end
    end
    return cannot
  end

  local function env_line(tls, extra)
    return "export UCX_TLS=" .. tls .. " UCX_NET_DEVICES=softib0:1 " .. (extra or "") ..
      " TBRT_SOFT_FABRIC=" .. shell_quote(os.getenv("TBRT_SOFT_FABRIC") or "ucx")
  end

  -- ucx_perftest tag_lat and tag_bw between two processes over tls; the
  -- client's output (stdout) and the server's (in stderr).
  local function perftest(tls, extra)
    local out = {}
    for _, test in ipairs { { "tag_lat", "8" }, { "tag_bw", "65536" } } do
      local port = X.free_port()
      local run = H.tbrt .. " exec -- ucx_perftest -p " .. port .. " -t " .. test[1] .. " -s " ..
        test[2] .. " -n 500"
      local r = in_namespace(dir, table.concat({
        env_line(tls, extra),
        "timeout 40 " .. run .. " > " .. dir .. "/srv.txt 2>&1 &",
        "for i in $(seq 200); do ss -ltn | grep -q ':" .. port .. " ' && break; sleep 0.05; done",
        "timeout 30 " .. run .. " 127.0.0.1; rc=$?",
        "wait",
        "cat " .. dir .. "/srv.txt >&2",
        "exit $rc" }, "\n"))
      local d = H.describe(r)
      assert.equal(0, r.code, d)
      assert.matches("Final:%s+500%s+[%d.]+", r.stdout, nil, d)
      out[test[1]] = r
    end
    return out
  end

  it("ucx_perftest tag_lat and tag_bw between two processes over ud_verbs (no SGE setting)", function()
    if namespace_refused() then pending(namespace_refused()) return end
    perftest("ud_verbs")
  end)

  it("ucx_perftest tag_lat and tag_bw over rc_verbs (ud_verbs beside it to wire up)", function()
    if namespace_refused() then pending(namespace_refused()) return end
    local runs = perftest("rc_verbs,ud_verbs", "UCX_LOG_LEVEL=info")
    for _, r in pairs(runs) do
      -- UCX says which transport carries tag messages: rc_verbs, not ud_verbs
      assert.matches("tag%(rc_verbs/softib0:1%)", r.stdout .. r.stderr, nil, H.describe(r))
    end
  end)

  it("ucx_info lists softib0 for rc_verbs and ud_verbs, with no device errors", function()
    if namespace_refused() then pending(namespace_refused()) return end
    local r = in_namespace(dir, env_line("rc_verbs,ud_verbs") .. "\n" ..
      H.tbrt .. " exec -- ucx_info -d")
    local out = r.stdout .. r.stderr
    assert.matches("Memory domain: softib0", out, nil, H.describe(r))
    assert.matches("Transport: ud_verbs\n#%s+Device: softib0:1", out)
    assert.matches("Transport: rc_verbs\n#%s+Device: softib0:1", out)
    assert.is_nil(out:find("ibv_create_srq", 1, true), out)
    assert.is_nil(out:find("not supported", 1, true), out)
  end)
end)
