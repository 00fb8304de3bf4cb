-- soft_hostile_spec.lua - everything a soft device reads from shared memory
-- is a peer's input. Two queue pairs live in two processes of their own
-- (spec/support/soft_end.lua); a third process (build/test/soft-scribble)
-- maps one of their contexts as a peer does and writes an impossible value
-- into one field: the registry slot, the context header, the QP block, a
-- receive or send slot, a result, an MR table entry. The process that reads
-- the field must say which field was wrong (an error completion or a broken
-- queue pair naming it), and both processes must live on.
local E = require("soft_ends")
local L = require("links")

local HUGE = "0x10000000000"          -- 2^40

-- The error a call or a completion reports, as text ("" when none).
local function err_of(r)
  if r.err then return r.err end
  local texts = {}
  for _, w in ipairs(r.wcs or {}) do
    if w.status ~= "IBV_WC_SUCCESS" then texts[#texts + 1] = w.status .. ": " .. tostring(w.why) end
  end
  return table.concat(texts, "; ")
end

local function expect_error(r, pattern)
  local text = err_of(r)
  assert.is_true(text:find(pattern) ~= nil,
    "expected an error matching '" .. pattern .. "', got: " .. require("cjson").encode(r))
end

local function expect_success(r, n)
  assert.is_nil(r.err)
  assert.equal(n or 1, #r.wcs, require("cjson").encode(r))
  for _, w in ipairs(r.wcs) do assert.equal("IBV_WC_SUCCESS", w.status, require("cjson").encode(r)) end
end

-- Post one request to x; unless the post itself failed, poll for its
-- completion. The reply of whichever said something.
local function post_and_poll(x, req, timeout)
  local r = x:call(req)
  if not r.err then r = x:call{ op = "poll", n = 1, timeout = timeout or 2 } end
  return r
end

-- A send from a to b after b's memory was scribbled; a must fail it.
local function sender_reads(field, value, pattern, o)
  o = o or {}
  return {
    name = "the sender, from the receiver's " .. field .. " = " .. value,
    personality = o.personality or "linux-rc", type = o.type or "RC",
    run = function(a, b)
      b:must{ op = "post_recv", len = 64, offset = o.recv_offset }
      for f, v in pairs(o.also or {}) do E.scribble(b, f, v) end
      E.scribble(b, field, value)
      expect_error(post_and_poll(a, { op = "post_send", len = o.send_len or 64,
        ud_qpn = o.type == "UD" and b.qpn or nil }), pattern)
    end,
  }
end

-- b posts a send that waits for a receive (credit flow), b's memory is
-- scribbled, then a posts the receive and so runs b's send queue itself.
local function executor_reads(field, value, pattern, o)
  o = o or {}
  return {
    name = "the receiver running the sender's queue, from the sender's " .. field .. " = " .. value,
    personality = "apple-uc", type = "UC",
    run = function(a, b)
      b:must{ op = "post_send", len = o.inline and 64 or 4096, inline = o.inline }
      for f, v in pairs(o.also or {}) do E.scribble(b, f, v) end
      E.scribble(b, field, value)
      expect_error(post_and_poll(a, { op = "post_recv", len = 4096 }), pattern)
    end,
  }
end

-- a posts a receive, its own field is scribbled, a polls: a must say so.
local function owner_reads(what, field, value, pattern)
  return {
    name = "the owner, from " .. what,
    personality = "linux-rc", type = "RC",
    run = function(a)
      a:must{ op = "post_recv", len = 64 }
      E.scribble(a, field, value)
      expect_error(a:call{ op = "poll", n = 1, timeout = 1 }, pattern)
    end,
  }
end

local cases = {
  -- the registry and the context header
  sender_reads("slot.qp_off", HUGE, "qp_off .*corrupt"),
  sender_reads("slot.ctx_fd", 0, "context fd 0 of pid %d+ is not a sealed memfd"),
  sender_reads("slot.qp_type", 3, "qp_type .*corrupt"),
  sender_reads("ctx.magic", 0, "magic .*corrupt"),
  sender_reads("ctx.version", 99, "version .*corrupt"),
  -- the receiver's queue pair block
  sender_reads("qp.rq_cap", 0, "rq_cap 0 .*corrupt"),
  sender_reads("qp.rq_cap", "0x7fffffff", "rq_cap .*corrupt"),
  sender_reads("qp.sq_cap", 0, "sq_cap 0 .*corrupt"),
  sender_reads("qp.rq_cap", 12, "rq_cap 12 is not a ring size %(a power of two.*corrupt"),
  sender_reads("qp.recv_db", 99999, "recv_db .*corrupt"),
  sender_reads("qp.qp_type", 3, "qp_type .*corrupt"),
  -- its posted receive
  sender_reads("rqe.0.num_sge", 1000, "num_sge 1000 .*corrupt"),
  sender_reads("rqe.0.total", HUGE, "total .*corrupt"),
  -- its MR table: a receive near the end of its buffer made to look 1 GiB
  -- long, and a 64 KiB message into it (beyond the memory behind it)
  sender_reads("mr.RKEY.length", HUGE, "beyond the end of its memory",
    { recv_offset = 65536 - 64, send_len = 65536,
      also = { ["rqe.0.sge0.length"] = "0x40000000", ["rqe.0.total"] = "0x40000000" } }),
  sender_reads("mr.RKEY.fd_off", HUGE, "fd_off .*corrupt"),
  sender_reads("mr.RKEY.memfd", 0, "not a sealed memfd"),
  -- UD: a datagram's target
  sender_reads("qp.rq_cap", 0, "rq_cap 0 .*corrupt", { type = "UD" }),

  -- the receiver runs the sender's queue: the sender's slots and indices
  executor_reads("swr.0.num_sge", 1000, "num_sge 1000 .*corrupt"),
  executor_reads("swr.0.total", HUGE, "total .*corrupt"),
  executor_reads("swr.0.total", 4000, "inline .*corrupt", { inline = true }),
  executor_reads("swr.0.opcode", 77, "opcode 77 .*corrupt"),
  executor_reads("qp.sq_tail", HUGE, "sq_tail .*corrupt"),
  executor_reads("qp.sq_cap", 0, "sq_cap 0 .*corrupt"),
  executor_reads("qp.sq_cap", 24, "sq_cap 24 is not a ring size %(a power of two.*corrupt"),
  executor_reads("mr.SKEY.length", HUGE, "beyond the end of its memory",
    { also = { ["swr.0.sge0.length"] = "0x40000000", ["swr.0.total"] = "0x40000000" } }),
  executor_reads("swr.0.next_try_ns", "0x7fffffffffffffff", "next_try_ns .*corrupt"),

  -- an owner reads back what peers may write into its own block
  {
    name = "the owner, from its own sq_head moved past its tail",
    personality = "linux-rc", type = "RC",
    run = function(a, b)
      b:must{ op = "post_recv", len = 64 }
      a:must{ op = "post_send", len = 64 }
      expect_success(a:call{ op = "poll", n = 1 })
      E.scribble(a, "qp.sq_head", HUGE)
      expect_error(post_and_poll(a, { op = "post_send", len = 64 }), "sq_head .*corrupt")
    end,
  },
  owner_reads("its own rq_cons moved past what it posted", "qp.rq_cons", HUGE, "rq_cons .*corrupt"),
  owner_reads("a receive slot that is neither posted nor done", "rqe.0.seq", 12345,
    "seq .*corrupt"),
  {
    name = "the owner, from a receive result longer than the receive",
    personality = "linux-rc", type = "RC",
    run = function(a, b)
      a:must{ op = "post_recv", len = 64 }
      b:must{ op = "post_send", len = 64 }
      expect_success(b:call{ op = "poll", n = 1 })
      E.scribble(a, "rqe.0.res.byte_len", "0x7fffffff")
      expect_error(a:call{ op = "poll", n = 1, timeout = 1 }, "byte_len .*corrupt")
    end,
  },
  {
    name = "the owner, from a small message's result whose data_len lies (scatter-to-CQE)",
    personality = "linux-rc", type = "RC",
    run = function(a, b)
      a:must{ op = "post_recv", len = 64 }
      b:must{ op = "post_send", len = 8 }       -- 8 bytes: they travel in the result
      expect_success(b:call{ op = "poll", n = 1 })
      E.scribble(a, "rqe.0.res.data_len", 200)
      expect_error(a:call{ op = "poll", n = 1, timeout = 1 }, "data_len 200 .*corrupt")
    end,
  },
  {
    name = "the owner, from a send result with no such status",
    personality = "apple-uc", type = "UC",
    run = function(a, b)
      a:must{ op = "post_send", len = 4096 }     -- waits for b's receive
      b:must{ op = "post_recv", len = 4096 }     -- b runs a's queue: b writes the result
      expect_success(b:call{ op = "poll", n = 1 })
      E.scribble(a, "swr.0.res.status", 200)
      expect_error(a:call{ op = "poll", n = 1, timeout = 1 }, "status 200 .*corrupt")
    end,
  },
  {
    name = "the owner, with its own caps zeroed, still posts and sends",
    personality = "linux-rc", type = "RC",
    run = function(a, b)
      E.scribble(a, "qp.rq_cap", 0)
      E.scribble(a, "qp.sq_cap", 0)
      a:must{ op = "post_recv", len = 64 }
      b:must{ op = "post_recv", len = 64 }
      a:must{ op = "post_send", len = 64 }
      expect_success(a:call{ op = "poll", n = 1 })
    end,
  },
  {
    name = "the owner, with its own timeout and mtu out of range, still times out right",
    personality = "linux-rc", type = "RC", timeout = 8, retry_cnt = 1,
    run = function(a, b)
      E.scribble(a, "qp.timeout", 200)
      E.scribble(a, "qp.mtu", 200)
      b:stop()
      expect_error(post_and_poll(a, { op = "post_send", len = 64 }, 3), "IBV_WC_RETRY_EXC_ERR")
    end,
  },
  {
    name = "the owner, with a stranger's pid in its send queue lock, still sends",
    personality = "linux-rc", type = "RC",
    run = function(a, b)
      b:must{ op = "post_recv", len = 64 }
      E.scribble(a, "qp.sq_lock", 1)
      expect_success(post_and_poll(a, { op = "post_send", len = 64 }))
    end,
  },
}

describe("soft device against a peer that scribbles on shared memory", function()
  for _, c in ipairs(cases) do
    it(c.name, L.async(function()
      local a, b = E.pair{ personality = c.personality, type = c.type, timeout = c.timeout,
        retry_cnt = c.retry_cnt }
      local ok, err = pcall(c.run, a, b)
      local ok2, err2 = pcall(E.close, a, b)
      assert(ok, err)
      assert(ok2, err2)
    end))
  end
end)
