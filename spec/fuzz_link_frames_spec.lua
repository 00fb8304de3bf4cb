-- fuzz_link_frames_spec.lua - libFuzzer against the engine's receive side
-- (spec/support/fuzz_link_frames.c): a peer link taken over, whose queue
-- pair sends what the input says into the ring of the link under test.
-- Seeds of well-formed streams (DATA frames, direct offers read through a
-- stride or straight into registered memory; in each framing, llama.cpp's
-- too, by recv and by views) arrive whole and exact; each kind of bad frame breaks the link
-- with the message that names it; then mutations of them all. A crash, a
-- sanitizer report, a byte handed out that is not the stream's, or a
-- failure without a reason fails it.
--
-- Built by `make fuzz` (clang), so it runs under the normal build's pass
-- only, and skips where clang or its libFuzzer runtime is missing.
-- TBRT_FUZZ_RUNS: another count of inputs.
local bit = require("bit")
local H = require("helpers")
local F = require("fuzz")

local RUNS = tonumber(os.getenv("TBRT_FUZZ_RUNS")) or 3000

local function le16(v) return string.char(bit.band(v, 255), bit.band(bit.rshift(v, 8), 255)) end
local function le32(v) return le16(bit.band(v, 0xffff)) .. le16(bit.rshift(v, 16)) end

-- the first byte (the harness's top comment): mode 0 linux-rc variable,
-- 1 linux-rc fixed, 2 apple-uc, 3 llama-apple, 32 llama-linux; + 4 views;
-- + 8 a's buffer registered; + 16 b keeps what a sends it (its receives
-- are not posted again)
local VARIABLE, FIXED, APPLE, LLAMA_APPLE, LLAMA_LINUX = 0, 1, 2, 3, 32
local VIEWS, REG, HOLD = 4, 8, 16
local function input(setup, ...) return string.char(setup) .. table.concat({ ... }) end
-- ops; DATA's bits: 0x08 skip a seq, 0x10 repeat one, 0x20 a length beyond
-- the payload, 0x40 8 bytes more in the SEND than the header says
local function data(s, bits) return string.char(1 + (bits or 0)) .. le16(#s) .. s end
local function raw(s) return string.char(0) .. le16(#s) .. s end
-- an offer of b's region from `off` bytes past its start (the harness counts
-- from 2 KiB before it), `len` bytes; bad_key: a key that is not b's
local function offer(off, len, bad_key)
  return string.char(bad_key and 10 or 2) .. le32(off + 2048) .. le32(len)
end
local function done(n) return string.char(3) .. le32(n) end
local function ask_back(n) return string.char(3 + 8) .. le32(n) end
local function back(n) return string.char(3 + 16) .. le32(n) end
local function turn(kib) return string.char(4, kib - 1) end
local function a_sends(n) return string.char(5, n - 1) end
local B_TURN = string.char(6)
local function corrupt(s, pos, val) return string.char(7) .. le16(#s) .. le16(pos) .. string.char(val) .. s end
-- the same by RDMA WRITE into a's next eager slot (bit 7; mode 0 only):
-- an eager frame (DATA's bits as above), one corrupted, raw bytes
local function eager(s, bits) return string.char(0x81 + (bits or 0)) .. le16(#s) .. s end
local function eager_corrupt(s, pos, val)
  return string.char(0x87) .. le16(#s) .. le16(pos) .. string.char(val) .. s
end
local function eager_raw(s) return string.char(0x80) .. le16(#s) .. s end

local text = string.rep("the quick brown fox ", 50)
-- well-formed: { input, bytes of the stream }
local good = {
  variable = { input(VARIABLE, data(text), data(string.rep("x", 4080)), turn(64), data("!")), #text + 4081 },
  fixed = { input(FIXED, data(text), turn(1), data(string.rep("q", 3000))), #text + 3000 },
  apple = { input(APPLE, data(text), data("z"), turn(4), data(text)), 2 * #text + 1 },
  views = { input(VARIABLE + VIEWS, data(text), data(string.rep("w", 500))), #text + 500 },
  window = { input(VARIABLE, data("before"), offer(100, 20000), data("after")), 6 + 20000 + 5 },
  registered = { input(VARIABLE + REG, offer(0, 60000), turn(64), data("after")), 60005 },
  offers = { input(VARIABLE + VIEWS, offer(10, 5000), turn(8), offer(7000, 3000)), 8000 },
  -- a's own sends between (b drops them, or holds them all: more than its ring)
  busy = { input(VARIABLE, a_sends(100), data(text), a_sends(5), B_TURN, offer(0, 9000),
    a_sends(200), turn(16)), #text + 9000 },
  llama_apple = { input(LLAMA_APPLE, data(text), data(string.rep("x", 4000)), turn(64), data("!")),
    #text + 4001 },
  llama_apple_views = { input(LLAMA_APPLE + VIEWS, data(text), a_sends(50), data("y")), #text + 1 },
  llama_linux = { input(LLAMA_LINUX, data(text), data(string.rep("x", 4000)), turn(64), data("!")),
    #text + 4001 },
  llama_linux_views = { input(LLAMA_LINUX + VIEWS, data(text), a_sends(50), data("y")), #text + 1 },
  -- eager frames among SEND frames, in one sequence; more than a's 64
  -- slots, read as they come; by views too
  eager = { input(VARIABLE, eager("tiny"), data(text), eager(string.rep("e", 232)), turn(1),
    eager("x"), eager("y"), data("z"), turn(4)), 4 + #text + 232 + 3 },
  eager_laps = { input(VARIABLE + VIEWS, string.rep(eager("0123456789") .. turn(1), 150)), 1500 },
  held = { input(VARIABLE + HOLD, a_sends(100), a_sends(100), data(text), a_sends(1),
    a_sends(1), a_sends(1), a_sends(1), a_sends(1), a_sends(1), a_sends(1), a_sends(1),
    a_sends(1), turn(4), data(text)), 2 * #text },
}
-- hostile: { input, what the broken link's message must say }
-- llama.cpp's Apple header: magic "RSEG" as a little-endian number, length
local rseg = le32(0x52534547) .. le32(3) .. "abc" .. string.rep("\0", 5)
-- b asks for its offer back: a gives it back while it has not begun on it
-- (the stream goes on without it), else reads on: { input, bytes a hands out }
local asked = {
  unread = { input(VARIABLE, data("before"), offer(0, 5000), ask_back(5000), data("after")), 11 },
  read = { input(VARIABLE, offer(0, 5000), turn(8), ask_back(5000), data("x")), 5001 },
  other_length = { input(VARIABLE, data("before"), offer(0, 5000), ask_back(4999), data("after")),
    5011 },
  none = { input(VARIABLE, ask_back(100), data("after")), 5 },
}
-- garbage b writes into a's eager slot is no frame (its seq is not the
-- next one): the stream goes on: { input, bytes a hands out }
local ignored = {
  garbage = { input(VARIABLE, eager_raw(string.rep("\255", 64)), data("b")), 1 },
  zeros_then_frame = { input(VARIABLE, eager_raw(string.rep("\0", 256)), eager("ok")), 2 },
}

-- a whole tbrt header (magic, length, seq, check) and its payload
local function tbrt_frame(payload)
  local magic, seq = 0x54524254, 1
  return le32(magic) .. le32(#payload) .. le32(seq) ..
    le32(bit.bnot(bit.bxor(magic, #payload, seq))) .. payload
end
local bad = {
  magic = { input(VARIABLE, corrupt("abc", 0, 0x55)), "frame magic 0x54524255 != TBRT" },
  check = { input(VARIABLE, corrupt("abc", 12, 0x55)), "frame header check 0x%x+ != 0x%x+ %(corrupted header%)" },
  length = { input(VARIABLE, data("a", 0x20)), "frame length 4081 exceeds the stride payload 4080" },
  sizes = { input(VARIABLE, data("a", 0x40)), "frame length 1 but the SEND carried 25 bytes" },
  dropped = { input(VARIABLE, data("a"), turn(1), data("b", 0x08)), "a frame was dropped on the wire" },
  repeated = { input(VARIABLE, data("a"), turn(1), data("b", 0x10)), "a frame was repeated on the wire" },
  llama = { input(VARIABLE, raw(rseg)), "a frame with llama.cpp's RSEG magic" },
  short = { input(APPLE, raw("tiny")), "a SEND of 4 bytes, shorter than the 16%-byte frame header" },
  outside = { input(VARIABLE, offer(-2048, 60000)), "direct read completion: IBV_WC_REM_ACCESS_ERR" },
  key = { input(VARIABLE, offer(0, 100, true)), "direct read completion: IBV_WC_REM_ACCESS_ERR" },
  empty = { input(VARIABLE, offer(0, 0)), "a direct offer of 0 bytes" },
  twice = { input(VARIABLE, offer(0, 100), offer(0, 100)), "a second direct offer before the first was read" },
  stray_back = { input(VARIABLE, back(5)), "a direct back frame %(5 bytes%), but no send of ours is asked back" },
  stray_done = { input(VARIABLE, done(5)), "a direct done frame %(5 bytes%), but no send of ours is lent" },
  fixed_offer = { input(FIXED, offer(0, 100)), "a direct offer frame on a link that takes no direct transfers %(RC, fixed framing%)" },
  rseg_magic = { input(LLAMA_APPLE, corrupt("abc", 0, 0x55)), "frame magic 0x52534555 != RSEG" },
  rseg_length = { input(LLAMA_APPLE, data("a", 0x20)), "frame length 131065 exceeds the stride payload 131064" },
  tbrt_on_llama_linux = { input(LLAMA_LINUX, raw(tbrt_frame("abc"))), "a SEND that starts with tbrt's TBRT header" },
  apple_offer = { input(APPLE, offer(0, 100)), "a direct offer frame on a link that takes no direct transfers %(UC, fixed framing%)" },
  eager_length = { input(VARIABLE, eager("a", 0x20)), "eager frame 1 in slot 0 says 233 bytes; a slot holds 1 to 232" },
  eager_empty = { input(VARIABLE, eager("")), "eager frame 1 in slot 0 says 0 bytes" },
  -- a frame the writer never finished (its trailer wrong), then a SEND
  -- frame after it: the gap is named
  eager_torn = { input(VARIABLE, eager_corrupt("abcdef", 24, 0), data("b")),
    "frame seq 2 != expected 1 %(a frame was dropped on the wire%)" },
  eager_skip = { input(VARIABLE, eager("a"), turn(1), eager("b", 0x08), data("c")),
    "frame seq 4 != expected 2 %(a frame was dropped on the wire%)" },

}

-- One input replayed with FUZZ_VERBOSE: its end line's fields, and the run.
local function replay(s)
  local dir = F.seeds_dir { s }
  local r = F.run("fuzz-link-frames", { "-runs=0", dir }, { timeout = 120, env = { FUZZ_VERBOSE = "1" } })
  H.rmtree(dir)
  assert.equal(0, r.code, H.describe(r))
  local exact, got, want, link, why =
    r.stderr:match("end: mode %d exact (%d) got (%d+) want (%d+) link (%a+) why: ([^\n]*)")
  assert.is_not_nil(exact, H.describe(r))
  return { exact = exact == "1", got = tonumber(got), want = tonumber(want), link = link, why = why }, r
end

local describe_once = os.getenv("TBRT_ASAN") and function() end or describe

describe_once("the engine's receive side against a hostile peer's frames (libFuzzer)", function()
  local built, why

  setup(function() built, why = F.build() end)

  it("hands out well-formed streams whole and exact, in every framing, by recv and by views", function()
    if not built then pending(why) return end
    for name, g in pairs(good) do
      local e, r = replay(g[1])
      assert.is_true(e.exact, name .. ": " .. r.stderr)
      assert.equal("up", e.link, name .. ": " .. e.why)
      assert.equal(g[2], e.want, name)
      assert.equal(g[2], e.got, name .. ": " .. r.stderr)
    end
  end)

  it("gives an offer back when asked before reading it, not after", function()
    if not built then pending(why) return end
    for name, c in pairs(asked) do
      local e, r = replay(c[1])
      assert.equal("up", e.link, name .. ": " .. r.stderr)
      assert.equal(c[2], e.got, name .. ": " .. r.stderr)
    end
  end)

  it("takes no garbage in an eager slot for a frame", function()
    if not built then pending(why) return end
    for name, c in pairs(ignored) do
      local e, r = replay(c[1])
      assert.equal("up", e.link, name .. ": " .. r.stderr)
      assert.equal(c[2], e.got, name .. ": " .. r.stderr)
    end
  end)

  it("bounds what it holds from a writer that ignores its credits", function()
    if not built then pending(why) return end
    -- 72 eager frames into 64 slots, taken by a's progress (b waits for
    -- room in its queue) but not read, then SENDs for every stride: the
    -- reader holds at most its slots and its strides
    local frames = {}
    for i = 1, 72 do frames[#frames + 1] = eager(string.rep(string.char(i), 232)) end
    for _ = 1, 10 do frames[#frames + 1] = data("x") end
    for _ = 1, 40 do frames[#frames + 1] = turn(64) end
    local e, r = replay(input(VARIABLE, table.concat(frames)))
    assert.is_false(e.exact, r.stderr)
    if e.link == "broken" then assert.matches("^link %d+: ", e.why) end
  end)

  it("breaks the link on each kind of bad frame, naming it", function()
    if not built then pending(why) return end
    for name, b in pairs(bad) do
      local e, r = replay(b[1])
      assert.equal("broken", e.link, name .. ": " .. r.stderr)
      assert.matches("^link %d+: ", e.why, name)
      assert.matches(b[2], e.why, name)
    end
  end)

  it("takes " .. RUNS .. " inputs from the seeds without a fault", function()
    if not built then pending(why) return end
    local list = {}
    for _, g in pairs(good) do list[#list + 1] = g[1] end
    for _, b in pairs(bad) do list[#list + 1] = b[1] end
    for _, c in pairs(asked) do list[#list + 1] = c[1] end
    for _, c in pairs(ignored) do list[#list + 1] = c[1] end
    local r = F.fuzz("fuzz-link-frames", list, RUNS)
    assert.equal(0, r.code, H.describe(r))
    assert.matches("Done " .. RUNS .. " runs", r.stderr)
  end)
end)
