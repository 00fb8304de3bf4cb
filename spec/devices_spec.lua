-- devices_spec.lua - `tbrt devices`: the table with its header row and the
-- flavor explained, -v with what ibv_devinfo -v shows (limits, ports, MTUs,
-- GID tables with types), -d DEV and -i PORT, --json; every figure checked
-- against what the library reports for the device on this machine.
local cjson = require("cjson")
local tbrt = require("tbrt")
local verbs = require("tbrt.verbs")
local H = require("helpers")

local function ok_run(r, code)
  assert.is_false(r.timed_out, H.describe(r))
  assert.equal(code or 0, r.code, H.describe(r))
end

local function devices(args, env)
  local full = { "devices" }
  for _, a in ipairs(args or {}) do full[#full + 1] = a end
  return H.run_tbrt(full, { env = env })
end

local function lines(text)
  local out = {}
  for l in (text .. "\n"):gmatch("([^\n]*)\n") do out[#out + 1] = l end
  return out
end

local function line_of(out, name)
  for _, l in ipairs(lines(out)) do
    if l:sub(1, #name + 1) == name .. " " then return l end
  end
end

-- The lines of the block "hca_id: NAME" (up to the next block).
local function block_of(out, name)
  local got, inside = {}, false
  for _, l in ipairs(lines(out)) do
    local id = l:match("^hca_id:%s+(%S+)$")
    if id then inside = id == name end
    if inside then got[#got + 1] = l end
  end
  return #got > 0 and (table.concat(got, "\n") .. "\n") or nil
end

local function quote(s) return (s:gsub("%p", "%%%0")) end

-- "    key:    value" at an indent, as the block prints it
local function field(indent, key, value)
  return "\n" .. string.rep(" ", indent) .. quote(key) .. ":%s+" .. quote(value) .. "\n"
end

local function gid_hex(raw)
  local g = {}
  for i = 1, 16, 2 do g[#g + 1] = string.format("%02x%02x", raw:byte(i), raw:byte(i + 1)) end
  return table.concat(g, ":")
end

local MTU_ENUM = { [256] = 1, [512] = 2, [1024] = 3, [2048] = 4, [4096] = 5 }

describe("tbrt devices", function()
  it("lists every device under a header row, says why an unusable one is, explains flavor", function()
    local r = devices()
    ok_run(r)
    local list = tbrt.devices()
    local first = lines(r.stdout)[1]
    assert.matches("^device%s+kind%s+personality%s+flavor%s+status$", first)
    local names = {}
    for _, d in ipairs(list) do
      names[d.name] = d
      local l = line_of(r.stdout, d.name)
      assert.is_not_nil(l, d.name .. " missing from\n" .. r.stdout)
      local _, kind, pers, flavor, state = l:match("^(%S+)%s+(%S+)%s+(%S+)%s+(%S+)%s+(.*)$")
      assert.equal(d.kind, kind, l)
      assert.equal(d.personality ~= "" and d.personality or "-", pers, l)
      assert.equal(d.flavor, flavor, l)
      assert.equal(d.usable and "usable" or ("unavailable: " .. d.why), state, l)
      -- the columns line up under the header
      assert.equal(first:find("kind"), l:find(kind, #d.name + 1, true), l)
    end
    assert.is_true(names.soft0 and names.soft0.usable, r.stdout)
    assert.is_true(names.soft1 and names.soft1.usable, r.stdout)
    if names.ibverbs and not names.ibverbs.usable then assert.is_true(#names.ibverbs.why > 0) end
    -- what the flavor column means, once, under the table
    assert.matches("\nflavor: [^\n]+\n%s+apple%s+[^\n]*TN3205[^\n]*UC", r.stdout)
    assert.matches("\n%s+linux%s+[^\n]*RC", r.stdout)
  end)

  it("with -v shows each soft device's wire", function()
    local r = devices({ "-v", "-d", "soft0" })
    ok_run(r)
    assert.matches("\n    wire: +auto %(shared memory on this host, RoCEv2 over UDP port %d+ elsewhere%)", r.stdout)
    r = devices({ "-v", "-d", "soft0" }, { TBRT_SOFT_WIRE = "udp" })
    ok_run(r)
    assert.matches("\n    wire: +udp %(RoCEv2 over UDP port %d+%)", r.stdout)
  end)

  it("with -v shows each usable device as ibv_devinfo -v does: limits, ports, MTUs, GIDs with types", function()
    local r = devices({ "-v" })
    ok_run(r)
    for _, d in ipairs(tbrt.devices()) do
      local block = block_of(r.stdout, d.name)
      if not d.usable then
        assert.is_nil(block, d.name .. " is not usable: no block for it")
      else
        assert.is_not_nil(block, d.name .. " missing from\n" .. r.stdout)
        -- a device model makes its link-local GID from a fresh MAC each
        -- time it is opened: only GIDs that two opens agree on are compared
        local dev, again = assert(verbs.open(d.name)), assert(verbs.open(d.name))
        local a = assert(dev:query())
        local raw = a.raw
        for k, v in pairs({ max_qp = a.max_qp, max_qp_wr = a.max_qp_wr, max_sge = a.max_sge,
            max_cqe = a.max_cqe, max_cq = raw.max_cq, max_mr = raw.max_mr, max_pd = raw.max_pd,
            phys_port_cnt = a.phys_port_cnt }) do
          assert.matches(field(4, k, tostring(v)), block, d.name .. " " .. k)
        end
        assert.matches(field(4, "max_mr_size", string.format("0x%x", a.max_mr_size)), block)
        assert.matches(field(4, "fw_ver", a.fw_ver), block)
        for p = 1, a.phys_port_cnt do
          local pa = assert(dev:port(p))
          local port_at = block:find(field(8, "port", tostring(p)))
          assert.is_not_nil(port_at, d.name .. " port " .. p .. "\n" .. block)
          local rest = block:sub(port_at + 1)
          local section = "\n" .. (rest:match("^(.-\n)        port:") or rest)
          local states = { ACTIVE = "PORT_ACTIVE (4)", DOWN = "PORT_DOWN (1)", INIT = "PORT_INIT (2)",
            ARMED = "PORT_ARMED (3)" }
          assert.matches(field(12, "state", states[pa.state]), section)
          assert.matches(field(12, "active_mtu", pa.active_mtu .. " (" .. MTU_ENUM[pa.active_mtu] .. ")"), section)
          local max_mtu = 128 * 2 ^ tonumber(pa.raw.max_mtu)
          assert.matches(field(12, "max_mtu", max_mtu .. " (" .. tonumber(pa.raw.max_mtu) .. ")"), section)
          assert.matches(field(12, "max_msg_sz", string.format("0x%x", pa.max_msg_sz)), section)
          assert.matches(field(12, "gid_tbl_len", tostring(pa.gid_tbl_len)), section)
          assert.matches(field(12, "link_layer", "Ethernet"), section)
          local other = assert(again:gids(p))
          for i, g in ipairs(assert(dev:gids(p))) do
            local hex = g.text == other[i].text and quote(gid_hex(g.gid)) or "[%x:]+"
            local typ = g.type and (", " .. ({ RoCEv1 = "RoCE v1", RoCEv2 = "RoCE v2", IB = "IB" })[g.type]) or ""
            assert.matches("\n            GID%[%s*" .. g.index .. "%]:%s+" .. hex .. quote(typ) .. "  %(",
              section, d.name .. " port " .. p .. " GID " .. g.index)
          end
        end
        dev:close()
        again:close()
      end
    end
    -- soft1 (linux-rc) has typed RoCE v1/v2 entries; 127.0.0.1 among them
    assert.matches("GID%[%s*%d+%]:%s+0000:0000:0000:0000:0000:ffff:7f00:0001, RoCE v2",
      block_of(r.stdout, "soft1"))
  end)

  it("takes -d DEV and -i PORT, and names what does not exist", function()
    local r = devices({ "-d", "soft0", "-i", "2" })
    ok_run(r)
    local ls = lines(r.stdout)
    assert.matches("^device%s+kind", ls[1])
    assert.matches("^soft0%s+soft%s+apple%-uc%s+apple%s+usable$", ls[2])
    assert.is_nil(line_of(r.stdout, "soft1"))
    local block = assert(block_of(r.stdout, "soft0"), r.stdout)
    assert.matches(field(8, "port", "2"), block)
    assert.is_nil(block:find("port:%s+1\n"), "only port 2:\n" .. block)
    assert.matches(field(12, "state", "PORT_ACTIVE (4)"), block)
    -- the limits and GIDs are -v's
    assert.is_nil(block:find("max_qp:", 1, true), block)
    assert.is_nil(block:find("GID[", 1, true), block)
    r = devices({ "-d", "soft0", "-i", "2", "-v" })
    ok_run(r)
    assert.matches("max_qp:%s+10\n", r.stdout)
    local lo = require("verbs_helpers").loopback_index("soft0", 2)
    assert.matches("GID%[%s*" .. lo .. "%]:%s+0000:0000:0000:0000:0000:ffff:7f00:0001  " ..
      "%(::ffff:127%.0%.0%.1%)", r.stdout)

    r = devices({ "-d", "nosuch0" })
    ok_run(r, 1)
    assert.matches("^tbrt: devices: no device named 'nosuch0' %(there are: [^\n]*soft0, soft1", r.stderr)
    r = devices({ "-d", "soft0", "-i", "3" })
    ok_run(r, 1)
    assert.matches("^tbrt: devices: soft0 has ports 1%.%.2, not 3", r.stderr)
    r = devices({ "-i", "0" })
    ok_run(r, 1)
    assert.matches("%-i/%-%-ib%-port: expected a port number from 1 to 255, got '0'", r.stderr)
  end)

  it("prints the same facts as JSON with --json", function()
    local r = devices({ "--json" })
    ok_run(r)
    local got = cjson.decode(r.stdout)
    local list = tbrt.devices()
    assert.equal(#list, #got)
    for i, d in ipairs(list) do
      for _, k in ipairs({ "name", "kind", "personality", "flavor", "usable", "why" }) do
        assert.equal(d[k], got[i][k], d.name .. " " .. k)
      end
      assert.is_nil(got[i].ports, "ports only with -v, -d or -i")
    end
    r = devices({ "--json", "-v", "-d", "soft1" })
    ok_run(r)
    got = cjson.decode(r.stdout)
    assert.equal(1, #got)
    local dev = assert(verbs.open("soft1"))
    local a = assert(dev:query())
    local j = got[1]
    assert.matches("^auto %(shared memory on this host, RoCEv2 over UDP port %d+ elsewhere%)", j.wire)
    assert.equal(a.max_qp, j.attributes.max_qp)
    assert.equal(a.max_qp_wr, j.attributes.max_qp_wr)
    assert.equal(a.max_sge, j.attributes.max_sge)
    assert.equal(a.max_cqe, j.attributes.max_cqe)
    assert.equal(string.format("0x%x", a.max_mr_size), j.attributes.max_mr_size)
    assert.equal(a.phys_port_cnt, #j.ports)
    local pa = assert(dev:port(1))
    assert.equal("PORT_ACTIVE", j.ports[1].state)
    assert.equal(pa.active_mtu, j.ports[1].active_mtu)
    assert.equal(pa.max_msg_sz, j.ports[1].max_msg_sz)
    local gids = assert(dev:gids(1))
    assert.equal(#gids, #j.ports[1].gids)
    for i, g in ipairs(gids) do
      assert.equal(g.index, j.ports[1].gids[i].index)
      assert.equal(g.text, j.ports[1].gids[i].gid)
      assert.equal(({ RoCEv1 = "RoCE v1", RoCEv2 = "RoCE v2" })[g.type], j.ports[1].gids[i].type)
    end
    dev:close()
  end)
end)
