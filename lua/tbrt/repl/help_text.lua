-- tbrt/repl/help_text.lua - what help() and help(obj) say at the REPL
-- (tbrt.repl.play): one line per helper, module function and method, kept here
-- as data beside the kinds of object they describe.
--
--   help_text.overview()       -> lines: the helpers, the modules, the keys
--   help_text.describe(obj)    -> lines: what obj is and its methods
--
-- A kind is recognized by its metatable where the module exports it
-- (link.Link, verbs.Dev, task.Task, play.Peer), else by its fields. Methods
-- an object has but the table does not describe are listed too, marked
-- "(no description)", so help never hides what is there.
local complete = require("tbrt.repl.complete")
local pretty = require("tbrt.repl.pretty")

local M = {}

M.OVERVIEW = {
  "tbrt REPL: Lua on the event loop. Each line runs as a task, so it may wait " ..
    "(link:recv(5), task.sleep(1)) while timers and links go on.",
  "",
  "Helpers:",
  { "pair{device=, child=, ...}", "two connected links a, b (more keys: link options; child=true: b is an echo peer process)" },
  { "help(obj)", "what obj can do: a link, device, task, channel, server, peer, module, luv handle" },
  { "links()", "the links open in this session (all are closed when the REPL exits)" },
  { "devices([verbose])", "the devices tbrt can see, as `tbrt devices [-v]`" },
  { "pp(v [, width])", "pretty-print v (cycle-safe, width-aware)" },
  "",
  "Modules: tbrt, task (tbrt.task), verbs (tbrt.verbs), uv (luv). help(tbrt) lists tbrt.",
  "",
  "Keys: Tab completes names, fields and methods (link:s<Tab>); Up/Down recall history; " ..
    "Ctrl-C cancels the running line, or drops the typed one; Ctrl-D on an empty line " ..
    "closes the open links and exits; Ctrl-L clears the screen; Ctrl-A/E/K/U/W edit.",
}

-- kind -> { title, match(obj) -> bool, entries = { {call, text} ... } }
M.KINDS = {}
local KIND_ORDER = {}

local function kind(name, title, match, entries)
  M.KINDS[name] = { title = title, match = match, entries = entries }
  KIND_ORDER[#KIND_ORDER + 1] = name
end

local function loaded(mod) return package.loaded[mod] end
local function has_meta(mod, field)
  return function(o)
    local m = loaded(mod)
    return m ~= nil and m[field] ~= nil and getmetatable(o) == m[field]
  end
end
local function is_module(mod) return function(o) return o ~= nil and o == loaded(mod) end end
local function shaped(...)
  local keys = { ... }
  return function(o)
    if type(o) ~= "table" then return false end
    for _, k in ipairs(keys) do if rawget(o, k) == nil then return false end end
    return true
  end
end

kind("tbrt", "the tbrt module", is_module("tbrt"), {
  { "connect(host, port, opts)", "connect a link (in a task): probe, caps exchange, activate" },
  { "listen(host, port, opts)", "a server; server:accept(timeout) gives links (port 0: any)" },
  { "devices()", "every device tbrt can see: name, kind, personality, usable, why" },
  { "probe(sock, opts)", "step 2 alone: device, port, GID, QP on a bootstrap socket" },
  { "setup(sock, opts, role)", "steps 2-4 on a connected bootstrap socket" },
  { "tcp_connect(host, port, timeout)", "step 1 alone: the bootstrap TCP socket" },
  { "tcp_listen(host, port)", "a bootstrap TCP server" },
  { "spawn(fn, ...)", "run fn as a task (tbrt.task.spawn)" },
  { "sleep(s)", "wait s seconds (in a task)" },
  { "all(list, timeout)", "wait for every task in list" },
  { "with_timeout(s, fn, ...)", "fn in a task, bounded" },
  { "channel(capacity)", "a channel between tasks" },
  { "run(fn, ...)", "run fn as a task until it finishes" },
  { "now()", "monotonic seconds" },
})

kind("link", "a link", has_meta("tbrt.link", "Link"), {
  { "send(data [, len, timeout])", "send all of data (string, or cdata + len): bytes, or nil, err" },
  { "flush([timeout])", "post the partly filled stride (message boundary)" },
  { "recv(n [, timeout])", "exactly n bytes: data, or nil, err, partial" },
  { "recv_some(max [, timeout])", "whatever has arrived, 1..max bytes" },
  { "recv_into(buf, n [, timeout, some])", "receive into a cdata buffer: count, or nil, err, count" },
  { "send_view([want, timeout])", "zero-copy: a writable span of the ring: ptr, len (<= want)" },
  { "commit(n)", "send the first n bytes of the open send view" },
  { "recv_view([timeout])", "zero-copy: the oldest received stride's unread bytes: ptr, len" },
  { "release([n])", "give back n (default all) bytes of the open recv view" },
  { "register(buf, len)", "register a cdata buffer: sends of >= 32 KiB from it go direct (peer READs)" },
  { "unregister(buf)", "undo register (EBUSY while a send from it is lent to the peer)" },
  { "stats()", "bytes/frames sent and received, completions, spins, sleeps; direct_*; wire_*" },
  { "faults({drop=, delay=, ...})", "inject faults on this link's device, while traffic runs ({} clears)" },
  { "info()", "id, state, device, kind, personality, framing, QP numbers, ..." },
  { "settimeouts(timeout, liveness, spin)", "seconds for waits, peer liveness, spinning" },
  { "caps()", "this side's capability block (24 bytes)" },
  { "activate(peer_caps [, timeout])", "RTR/RTS with the peer's caps, then readiness" },
  { "is_tcp()", "true when the link fell back to (or chose) TCP" },
  { "why()", "the last error, or why the device was chosen" },
  { "teardown()", "what closing did, step by step" },
  { "verbs()", "the device, QP and CQ underneath (cdata)" },
  { "inject(what)", "test hook: corrupt the next frame (magic, length, skip, repeat) or offer (offer-*)" },
  { "close([timeout])", "flush, wait for sends in flight, goodbye, teardown" },
})

kind("server", "a server (tbrt.listen)", has_meta("tbrt", "Server"), {
  { "accept([timeout])", "the next link (in a task)" },
  { "close()", "stop listening" },
})

kind("peer", "an echo peer process (pair{child=true})", has_meta("tbrt.repl.play", "Peer"), {
  { "output()", "what the peer printed" },
  { "wait([timeout])", "its exit: code, signal" },
  { "kill([sig])", "send a signal (default sigterm)" },
  { "close([timeout])", "end it: SIGTERM, then SIGKILL" },
})

kind("verbs", "the tbrt.verbs module", is_module("tbrt.verbs"), {
  { "open(name, opts)", "open a device (soft0, soft1, mlx5:model0, ibverbs, ...)" },
  { "connect(qp_a, qp_b, opts)", "bring two QPs of this process to RTS facing each other" },
  { "gid_text(raw)", "a 16-byte GID as text" },
})

kind("device", "a verbs device", has_meta("tbrt.verbs", "Dev"), {
  { "query()", "device attributes (fw_ver, max_qp, phys_port_cnt, ...)" },
  { "port(n)", "port attributes: state, active_mtu, gid_tbl_len, ..." },
  { "gids(port)", "the non-empty GIDs of a port: index, text, type" },
  { "pd()", "allocate a protection domain" },
  { "cq(n)", "create a completion queue of n entries" },
  { "ah{pd=, dgid=, port=, sgid_index=}", "an address handle (UD)" },
  { "faults({drop=, delay=, seed=, ...})", "soft: set the fault sets (TBRT_FAULTS's keys; {} clears)" },
  { "stats([qpn])", "soft: packets, retransmits, NAKs, drops injected, ICRC failures, ..." },
  { "describe()", "how the device moves data (its wire, port, capture, faults)" },
  { "set_port(port, state)", "take a port down or up at run time (nil: as configured)" },
  { "why()", "the device's last error" },
  { "close()", "close the device" },
})

kind("pd", "a protection domain", has_meta("tbrt.verbs", "PD"), {
  { "qp{type=, send_cq=, recv_cq=, send_wr=, recv_wr=, ...}", "create a QP" },
  { "reg(buf, len [, access])", "register memory (the device holds buf until dereg or close)" },
  { "free()", "free the PD" },
})

kind("cq", "a completion queue", has_meta("tbrt.verbs", "CQ"), {
  { "poll([n])", "up to n completions, with status names" },
  { "wait(n [, timeout])", "poll until n completions (busy)" },
  { "destroy()", "destroy the CQ" },
})

kind("qp", "a queue pair", has_meta("tbrt.verbs", "QP"), {
  { "modify{state=, port=, ...}", "modify with named attributes (mask from the keys)" },
  { "state()", "the QP state name" },
  { "post_send{mr=, len=, opcode=, ...}", "post one send" },
  { "post_recv{mr=, len=, ...}", "post one receive" },
  { "destroy()", "destroy the QP" },
})

kind("mr", "a memory region", has_meta("tbrt.verbs", "MR"), {
  { "dereg()", "deregister" },
})

kind("task", "a task", has_meta("tbrt.task", "Task"), {
  { "status()", "ready, running, waiting, done, failed or canceled" },
  { "join([timeout])", "its results, or nil, err" },
  { "cancel([reason])", "make its wait raise ECANCELED" },
})

kind("task module", "the tbrt.task module", is_module("tbrt.task"), {
  { "spawn(fn, ...)", "run fn as a task (starts at the next turn)" },
  { "sleep(s)", "wait s seconds" },
  { "all(list [, timeout])", "wait for every task" },
  { "with_timeout(s, fn, ...)", "fn in a task, bounded" },
  { "wait(cond [, timeout])", "until cond() is true" },
  { "channel([capacity])", "a channel" },
  { "poll(fd, events [, timeout])", "until fd is readable/writable" },
  { "current()", "the running task" },
  { "run(fn, ...)", "fn as a task until it finishes" },
})

kind("channel", "a channel", has_meta("tbrt.task", "Channel"), {
  { "send(v [, timeout])", "true, or nil, err (EPIPE when closed)" },
  { "recv([timeout])", "v, or nil, err (EOF when closed and empty)" },
  { "count()", "values buffered" },
  { "close()", "wake every waiter" },
})

-- Words of text in lines of at most width columns (a longer word gets a
-- line of its own).
local function wrap(text, width)
  local lines, cur = {}, ""
  for word in text:gmatch("%S+") do
    if cur ~= "" and #cur + 1 + #word > width then
      lines[#lines + 1] = cur
      cur = word
    else
      cur = cur == "" and word or (cur .. " " .. word)
    end
  end
  lines[#lines + 1] = cur
  return lines
end

-- Narrowest room left for the descriptions before they go under the calls.
local MIN_TEXT = 24

-- "call   text" in two columns fitted to the width: the text wraps under
-- itself, or starts on the next line when the calls leave too little room.
local function align(entries, indent)
  local width = pretty.width()
  local w = 0
  for _, e in ipairs(entries) do w = math.max(w, #e[1]) end
  local col = #indent + w + 2
  if width - col < MIN_TEXT then col = #indent + 4 end
  local out = {}
  for _, e in ipairs(entries) do
    local head = indent .. e[1]
    local text = wrap(e[2], math.max(width - col - 1, MIN_TEXT))
    local first = 1
    if #head + 2 <= col then
      out[#out + 1] = head .. string.rep(" ", col - #head) .. text[1]
      first = 2
    else
      out[#out + 1] = head
    end
    for i = first, #text do out[#out + 1] = string.rep(" ", col) .. text[i] end
  end
  return out
end

function M.overview()
  local out, run = {}, {}
  local function flush()
    if #run > 0 then
      for _, l in ipairs(align(run, "  ")) do out[#out + 1] = l end
      run = {}
    end
  end
  for _, item in ipairs(M.OVERVIEW) do
    if type(item) == "table" then
      run[#run + 1] = item
    else
      flush()
      for _, l in ipairs(item == "" and { "" } or wrap(item, pretty.width() - 1)) do out[#out + 1] = l end
    end
  end
  flush()
  return out
end

-- Functions obj offers that entries do not name ("_private" ones left out).
local function undocumented(obj, entries)
  local named = {}
  for _, e in ipairs(entries) do named[e[1]:match("^[%w_]+")] = true end
  local extra = {}
  for name, v in pairs(complete.fields(obj)) do
    if type(v) == "function" and not named[name] and name:sub(1, 1) ~= "_" and not name:match("^__") then
      extra[#extra + 1] = { name .. "(...)", "(no description)" }
    end
  end
  table.sort(extra, function(a, b) return a[1] < b[1] end)
  return extra
end

local function label(obj)
  local ok, s = pcall(tostring, obj)
  return ok and s or type(obj)
end

function M.describe(obj)
  if obj == nil then return { "nil: nothing to describe (a misspelled name?)" } end
  for _, name in ipairs(KIND_ORDER) do
    local k = M.KINDS[name]
    local ok, yes = pcall(k.match, obj)
    if ok and yes then
      local entries = {}
      for _, e in ipairs(k.entries) do entries[#entries + 1] = e end
      for _, e in ipairs(undocumented(obj, k.entries)) do entries[#entries + 1] = e end
      local head = k.title .. (type(obj) == "table" and getmetatable(obj) and (": " .. label(obj)) or "")
      local out = { head }
      for _, l in ipairs(align(entries, "  ")) do out[#out + 1] = l end
      return out
    end
  end
  local t = type(obj)
  if t == "string" then return { "a string (" .. #obj .. " bytes): s:len(), s:sub(i, j), s:byte(i), ... (the string library)" } end
  if t == "table" or t == "userdata" then
    local fns = undocumented(obj, {})
    local out = { label(obj) .. (#fns > 0 and ": its functions" or ": no functions") }
    for _, e in ipairs(fns) do out[#out + 1] = "  " .. e[1] end
    return out
  end
  return { label(obj) .. " (a " .. t .. ")" }
end

return M
