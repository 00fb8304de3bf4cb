-- tbrt/cli/devices.lua - `tbrt devices`: every device tbrt can see, usable
-- or not (and why not), and with -v what `ibv_devinfo -v` shows of each:
-- device attributes and limits, ports (state, MTUs, LIDs, link layer,
-- max_msg_sz, ...) and the GID table with types.
--
--   tbrt devices                 the table (a header row; flavor explained under it)
--   tbrt devices -v              the table, then each usable device in full
--   tbrt devices -d soft0 -i 2   one device, one port (the block without -v's limits)
--   tbrt devices --json [-v]     the same facts as JSON
--
-- The attribute lists are data (DEVICE_FIELDS, PORT_FIELDS), in
-- ibv_devinfo's order and with its names, so the two can be compared line
-- by line; the text uses spaces where ibv_devinfo uses tabs.
local ffi = require("ffi")
local bit = require("bit")

local M = {}

M.name = "devices"
M.summary = "list every device tbrt can see, usable or not (and why not); -v: what ibv_devinfo -v shows"
M.usage = "usage: tbrt devices [-v] [-d DEV] [-i PORT] [--json]"

function M.declare(cmd)
  cmd:flag("-v --verbose", "each usable device in full: attributes and limits, ports, GID tables")
  cmd:option("-d --ib-dev", "only this device (a name from the table)"):argname("DEV")
  cmd:option("-i --ib-port", "only this port of each device shown"):argname("PORT")
    :convert(function(s)
      local v = tonumber(s)
      if not v or v % 1 ~= 0 or v < 1 or v > 255 then
        return nil, "-i/--ib-port: expected a port number from 1 to 255, got '" .. s .. "'"
      end
      return v
    end)
  cmd:flag("--json", "print the facts as JSON (a list of devices)")
end

M.FLAVOR_NOTE = {
  "flavor: the rules a link follows on the device.",
  "  apple  Thunderbolt 5 RDMA as Apple's TN3205 describes it: UC queue pairs only, a SEND and its",
  "         RECV cover the same 4 KiB frames (fixed framing), receives posted after RTS, Apple caps",
  "  linux  rdma-core / RoCE (ConnectX): RC queue pairs, variable framing, receives posted at INIT,",
  "         Linux caps",
}

---------------------------------------------------------------------------
-- Values as ibv_devinfo prints them.

local MTU = { [1] = 256, [2] = 512, [3] = 1024, [4] = 2048, [5] = 4096 }
local PORT_STATE = { [1] = "PORT_DOWN", [2] = "PORT_INIT", [3] = "PORT_ARMED", [4] = "PORT_ACTIVE",
  [5] = "PORT_ACTIVE_DEFER" }
local ATOMIC = { [0] = "ATOMIC_NONE", [1] = "ATOMIC_HCA", [2] = "ATOMIC_GLOB" }
local LINK_LAYER = { [0] = "InfiniBand", [1] = "InfiniBand", [2] = "Ethernet" }
local WIDTH = { [1] = "1X", [2] = "4X", [4] = "8X", [8] = "12X", [16] = "2X" }
local SPEED = { [1] = "2.5 Gbps", [2] = "5.0 Gbps", [4] = "10.0 Gbps", [8] = "10.0 Gbps",
  [16] = "14.0 Gbps", [32] = "25.0 Gbps", [64] = "50.0 Gbps", [128] = "100.0 Gbps" }
local VL = { [1] = "1", [2] = "2", [3] = "4", [4] = "8", [5] = "15" }
local PHYS_STATE = { [1] = "SLEEP", [2] = "POLLING", [3] = "DISABLED",
  [4] = "PORT_CONFIGURATION TRAINING", [5] = "LINK_UP", [6] = "LINK_ERROR_RECOVERY", [7] = "PHY TEST" }
-- enum ibv_device_cap_flags (infiniband/verbs.h), bit -> name
local CAP_FLAGS = {
  { 0, "RESIZE_MAX_WR" }, { 1, "BAD_PKEY_CNTR" }, { 2, "BAD_QKEY_CNTR" }, { 3, "RAW_MULTI" },
  { 4, "AUTO_PATH_MIG" }, { 5, "CHANGE_PHY_PORT" }, { 6, "UD_AV_PORT_ENFORCE" },
  { 7, "CURR_QP_STATE_MOD" }, { 8, "SHUTDOWN_PORT" }, { 9, "INIT_TYPE" },
  { 10, "PORT_ACTIVE_EVENT" }, { 11, "SYS_IMAGE_GUID" }, { 12, "RC_RNR_NAK_GEN" },
  { 13, "SRQ_RESIZE" }, { 14, "N_NOTIFY_CQ" }, { 17, "MEM_WINDOW" }, { 18, "UD_IP_CSUM" },
  { 20, "XRC" }, { 21, "MEM_MGT_EXTENSIONS" }, { 23, "MEM_WINDOW_TYPE_2A" },
  { 24, "MEM_WINDOW_TYPE_2B" }, { 25, "RC_IP_CSUM" }, { 26, "RAW_IP_CSUM" },
  { 29, "MANAGED_FLOW_STEERING" },
}
local GID_TYPE = { [0] = "IB", RoCEv1 = "RoCE v1", RoCEv2 = "RoCE v2", IB = "IB" }

-- A big-endian 64-bit GUID field of the device attributes as
-- xxxx:xxxx:xxxx:xxxx (its bytes in memory order).
local function guid(attr, name)
  local p = ffi.cast("const uint8_t *", attr) + ffi.offsetof("struct ibv_device_attr", name)
  local g = {}
  for i = 0, 7, 2 do g[#g + 1] = string.format("%02x%02x", p[i], p[i + 1]) end
  return table.concat(g, ":")
end

-- 0x and the shortest hex of a (64-bit) value.
local function hex(v)
  local s = bit.tohex(ffi.cast("uint64_t", v), 16):gsub("^0+", "")
  return "0x" .. (s == "" and "0" or s)
end

local function enum(names)
  return function(v)
    local n = tonumber(v)
    return string.format("%s (%d)", names[n] or "invalid", n), names[n] or n
  end
end
local function mtu(v)
  local n = tonumber(v)
  return string.format("%s (%d)", MTU[n] and tostring(MTU[n]) or "invalid MTU", n), MTU[n] or n
end

-- Each field: { ibv_devinfo's name, struct field (or a function of the
-- struct), text(v) -> shown[, json] }. verbose = true: -v only.
local function dec(v) return tostring(tonumber(v)), tonumber(v) end
local function hexs(v) local s = hex(v) return s, s end
local function hex8(v) local s = string.format("0x%08x", tonumber(v)) return s, tonumber(v) end
local function hex4(v) local s = string.format("0x%04x", tonumber(v)) return s, tonumber(v) end
local function hex2(v) local s = string.format("0x%02x", tonumber(v)) return s, tonumber(v) end
local function hexd(v) local s = string.format("0x%x", tonumber(v)) return s, tonumber(v) end

M.DEVICE_FIELDS = {
  { "fw_ver", function(a) return ffi.string(a.fw_ver) end, function(v) return v, v end },
  { "node_guid", function(a) return guid(a, "node_guid") end, function(v) return v, v end },
  { "sys_image_guid", function(a) return guid(a, "sys_image_guid") end, function(v) return v, v end },
  { "vendor_id", "vendor_id", hex4 },
  { "vendor_part_id", "vendor_part_id", dec },
  { "hw_ver", "hw_ver", function(v) local s = string.format("0x%X", tonumber(v)) return s, tonumber(v) end },
  { "phys_port_cnt", "phys_port_cnt", dec },
  { "max_mr_size", "max_mr_size", hexs, verbose = true },
  { "page_size_cap", "page_size_cap", hexs, verbose = true },
  { "max_qp", "max_qp", dec, verbose = true },
  { "max_qp_wr", "max_qp_wr", dec, verbose = true },
  { "device_cap_flags", "device_cap_flags", hex8, verbose = true, flags = true },
  { "max_sge", "max_sge", dec, verbose = true },
  { "max_sge_rd", "max_sge_rd", dec, verbose = true },
  { "max_cq", "max_cq", dec, verbose = true },
  { "max_cqe", "max_cqe", dec, verbose = true },
  { "max_mr", "max_mr", dec, verbose = true },
  { "max_pd", "max_pd", dec, verbose = true },
  { "max_qp_rd_atom", "max_qp_rd_atom", dec, verbose = true },
  { "max_ee_rd_atom", "max_ee_rd_atom", dec, verbose = true },
  { "max_res_rd_atom", "max_res_rd_atom", dec, verbose = true },
  { "max_qp_init_rd_atom", "max_qp_init_rd_atom", dec, verbose = true },
  { "max_ee_init_rd_atom", "max_ee_init_rd_atom", dec, verbose = true },
  { "atomic_cap", "atomic_cap", enum(ATOMIC), verbose = true },
  { "max_ee", "max_ee", dec, verbose = true },
  { "max_rdd", "max_rdd", dec, verbose = true },
  { "max_mw", "max_mw", dec, verbose = true },
  { "max_raw_ipv6_qp", "max_raw_ipv6_qp", dec, verbose = true },
  { "max_raw_ethy_qp", "max_raw_ethy_qp", dec, verbose = true },
  { "max_mcast_grp", "max_mcast_grp", dec, verbose = true },
  { "max_mcast_qp_attach", "max_mcast_qp_attach", dec, verbose = true },
  { "max_total_mcast_qp_attach", "max_total_mcast_qp_attach", dec, verbose = true },
  { "max_ah", "max_ah", dec, verbose = true },
  { "max_fmr", "max_fmr", dec, verbose = true },
  { "max_map_per_fmr", "max_map_per_fmr", dec, verbose = true, unless_zero = "max_fmr" },
  { "max_srq", "max_srq", dec, verbose = true },
  { "max_srq_wr", "max_srq_wr", dec, verbose = true, unless_zero = "max_srq" },
  { "max_srq_sge", "max_srq_sge", dec, verbose = true, unless_zero = "max_srq" },
  { "max_pkeys", "max_pkeys", dec, verbose = true },
  { "local_ca_ack_delay", "local_ca_ack_delay", dec, verbose = true },
}

M.PORT_FIELDS = {
  { "state", "state", enum(PORT_STATE) },
  { "max_mtu", "max_mtu", mtu },
  { "active_mtu", "active_mtu", mtu },
  { "sm_lid", "sm_lid", dec },
  { "port_lid", "lid", dec },
  { "port_lmc", "lmc", hex2 },
  { "link_layer", "link_layer", function(v) local s = LINK_LAYER[tonumber(v)] or "Unknown" return s, s end },
  { "max_msg_sz", "max_msg_sz", hexd, verbose = true },
  { "port_cap_flags", "port_cap_flags", hex8, verbose = true },
  { "port_cap_flags2", "port_cap_flags2", hex4, verbose = true },
  { "max_vl_num", "max_vl_num", function(v)
    local n = tonumber(v)
    return string.format("%s (%d)", VL[n] or "invalid value", n), tonumber(VL[n]) or n
  end, verbose = true },
  { "bad_pkey_cntr", "bad_pkey_cntr", hexd, verbose = true },
  { "qkey_viol_cntr", "qkey_viol_cntr", hexd, verbose = true },
  { "sm_sl", "sm_sl", dec, verbose = true },
  { "pkey_tbl_len", "pkey_tbl_len", dec, verbose = true },
  { "gid_tbl_len", "gid_tbl_len", dec, verbose = true },
  { "subnet_timeout", "subnet_timeout", dec, verbose = true },
  { "init_type_reply", "init_type_reply", dec, verbose = true },
  { "active_width", "active_width", enum(WIDTH), verbose = true },
  { "active_speed", "active_speed", enum(SPEED), verbose = true },
  { "phys_state", "phys_state", enum(PHYS_STATE), verbose = true },
}

-- { {name, text, json, field} ... } of a struct by a field list.
local function values(fields, raw, verbose)
  local out = {}
  for _, f in ipairs(fields) do
    if verbose or not f.verbose then
      local v = type(f[2]) == "function" and f[2](raw) or raw[f[2]]
      if not (f.unless_zero and tonumber(raw[f.unless_zero]) == 0) then
        local text, json = f[3](v)
        out[#out + 1] = { name = f[1], text = text, json = json, field = f }
      end
    end
  end
  return out
end

local function cap_flag_names(v)
  local names = {}
  v = tonumber(v)
  local known = 0
  for _, c in ipairs(CAP_FLAGS) do
    local b = bit.lshift(1, c[1])
    known = bit.bor(known, b)
    if bit.band(v, b) ~= 0 then names[#names + 1] = c[2] end
  end
  local unknown = bit.band(v, bit.bnot(known))
  if unknown ~= 0 then names[#names + 1] = string.format("Unknown flags: 0x%X", unknown) end
  return names
end

-- GID text as ibv_devinfo prints it: eight groups of four hex digits.
local function gid_full(raw)
  local g = {}
  for i = 1, 16, 2 do g[#g + 1] = string.format("%02x%02x", raw:byte(i), raw:byte(i + 1)) end
  return table.concat(g, ":")
end

---------------------------------------------------------------------------
-- Opening a device and reading what there is to show.

-- The facts of one usable device: { attrs = values, ports = { {port, values, gids} } }
-- or nil, err.
local function read_device(name, verbose, only_port)
  local verbs = require("tbrt.verbs")
  local dev, err = verbs.open(name)
  if not dev then return nil, "cannot open: " .. tostring(err) end
  local facts = {}
  local ok, perr = pcall(function()
    local a = assert(dev:query())
    facts.attrs = values(M.DEVICE_FIELDS, a.raw, verbose)
    facts.wire = dev:describe()         -- soft: its wire (shm, udp, auto) and settings
    facts.cap_flags = cap_flag_names(a.raw.device_cap_flags)
    facts.nports = a.phys_port_cnt
    if only_port and only_port > a.phys_port_cnt then
      error(string.format("%s has port%s 1..%d, not %d", name, a.phys_port_cnt == 1 and "" or "s",
        a.phys_port_cnt, only_port), 0)
    end
    facts.ports = {}
    for p = 1, a.phys_port_cnt do
      if not only_port or p == only_port then
        local pa = assert(dev:port(p))
        local port = { port = p, values = values(M.PORT_FIELDS, pa.raw, verbose) }
        if verbose then port.gids = assert(dev:gids(p)) end
        facts.ports[#facts.ports + 1] = port
      end
    end
  end)
  dev:close()
  if not ok then return nil, tostring(perr) end
  return facts
end

---------------------------------------------------------------------------
-- Text.

local function pad_table(rows)
  local w = {}
  for _, r in ipairs(rows) do
    for i = 1, #r - 1 do w[i] = math.max(w[i] or 0, #r[i]) end
  end
  local out = {}
  for k, r in ipairs(rows) do
    local cells = {}
    for i = 1, #r do cells[i] = i < #r and (r[i] .. string.rep(" ", w[i] - #r[i])) or r[i] end
    out[k] = table.concat(cells, "  ")
  end
  return out
end

local KEY_WIDTH = 33

local function kv(indent, key, value)
  local head = string.rep(" ", indent) .. key .. ":"
  return head .. string.rep(" ", math.max(1, KEY_WIDTH - #head)) .. value
end

local function block_lines(d, facts, verbose)
  local out = { kv(0, "hca_id", d.name) }
  out[#out + 1] = kv(4, "kind", d.kind .. (d.personality ~= "" and (", personality " .. d.personality) or "") ..
    ", flavor " .. (d.flavor or "-"))
  if facts.wire and facts.wire ~= "" then out[#out + 1] = kv(4, "wire", facts.wire) end
  for _, v in ipairs(facts.attrs) do
    out[#out + 1] = kv(4, v.name, v.text)
    if v.field.flags then
      for _, n in ipairs(facts.cap_flags) do out[#out + 1] = string.rep(" ", KEY_WIDTH + 4) .. n end
    end
  end
  for _, p in ipairs(facts.ports) do
    out[#out + 1] = kv(8, "port", tostring(p.port))
    for _, v in ipairs(p.values) do out[#out + 1] = kv(12, v.name, v.text) end
    for _, g in ipairs(p.gids or {}) do
      out[#out + 1] = kv(12, string.format("GID[%3d]", g.index),
        gid_full(g.gid) .. (g.type and (", " .. (GID_TYPE[g.type] or g.type)) or "") ..
        "  (" .. g.text .. ")")
    end
  end
  return out
end

local function json_of(d, facts)
  local o = { name = d.name, kind = d.kind, personality = d.personality, flavor = d.flavor,
    usable = d.usable, why = d.why }
  if facts then
    o.attributes = {}
    if facts.wire and facts.wire ~= "" then o.wire = facts.wire end
    for _, v in ipairs(facts.attrs) do o.attributes[v.name] = v.json end
    if #facts.cap_flags > 0 and o.attributes.device_cap_flags then o.attributes.device_cap_flag_names = facts.cap_flags end
    o.ports = {}
    for _, p in ipairs(facts.ports) do
      local jp = { port = p.port }
      for _, v in ipairs(p.values) do jp[v.name] = v.json end
      if p.gids and #p.gids > 0 then
        jp.gids = {}
        for _, g in ipairs(p.gids) do
          jp.gids[#jp.gids + 1] = { index = g.index, gid = g.text,
            type = g.type and (GID_TYPE[g.type] or g.type) or nil }
        end
      end
      o.ports[#o.ports + 1] = jp
    end
  end
  return o
end

-- args (as `tbrt devices` parses them): verbose, ib_dev, ib_port, json.
-- write: where text goes (io.write). Returns the exit code; a device or
-- port that does not exist is an error (raised as text).
function M.run(args, write)
  write = write or io.write
  args = args or {}
  local tbrt = require("tbrt")
  local list = tbrt.devices()
  if args.ib_dev then
    local found, names = nil, {}
    for _, d in ipairs(list) do
      names[#names + 1] = d.name
      if d.name == args.ib_dev then found = d end
    end
    if not found then
      error(string.format("devices: no device named '%s' (there are: %s)", args.ib_dev,
        #names > 0 and table.concat(names, ", ") or "none"), 0)
    end
    list = { found }
  end
  local detail = args.verbose or args.ib_dev ~= nil or args.ib_port ~= nil
  local facts, code = {}, 0
  if detail then
    for i, d in ipairs(list) do
      if d.usable then
        local f, err = read_device(d.name, args.verbose, args.ib_port)
        if f then facts[i] = f else facts[i] = { error = err } end
        if not f and args.ib_dev then error("devices: " .. err, 0) end
      end
    end
  end
  if args.json then
    local cjson = require("cjson")
    if #list == 0 then write("[]\n") return 0 end
    local out = {}
    for i, d in ipairs(list) do
      local f = facts[i]
      out[i] = json_of(d, f and not f.error and f or nil)
      if f and f.error then out[i].error = f.error end
    end
    write(cjson.encode(out), "\n")
    return 0
  end
  if #list == 0 then
    write("no devices\n")
    return 0
  end
  local rows = { { "device", "kind", "personality", "flavor", "status" } }
  for _, d in ipairs(list) do
    rows[#rows + 1] = { d.name, d.kind, d.personality ~= "" and d.personality or "-", d.flavor or "-",
      d.usable and "usable" or ("unavailable: " .. (d.why ~= "" and d.why or "no reason given")) }
  end
  for _, l in ipairs(pad_table(rows)) do write(l, "\n") end
  if not detail then
    write("\n")
    for _, l in ipairs(M.FLAVOR_NOTE) do write(l, "\n") end
    return 0
  end
  for i, d in ipairs(list) do
    local f = facts[i]
    if f then
      write("\n")
      if f.error then
        write(kv(0, "hca_id", d.name), "\n", kv(4, "error", f.error), "\n")
        code = 1
      else
        for _, l in ipairs(block_lines(d, f, args.verbose)) do write(l, "\n") end
      end
    end
  end
  return code
end

return M
