-- repl_spec.lua - the REPL as a user meets it: tbrt run in a real
-- pseudo-terminal (spec/support/pty.lua), keys typed, the screen read.
-- Then its parts on their own: the pretty printer, the key decoder,
-- completion, history, pair{} and help().
local bit = require("bit")
local ffi = require("ffi")
local H = require("helpers")
local pty = require("pty")
local task = require("tbrt.task")

local K = pty.keys
local dir

local function async(fn) return function() return task.run(fn) end end

-- Run body(p) with tbrt in a terminal; the program is killed and the
-- terminal closed whatever happens. opts: args, env (changes), history.
local function repl(opts, body)
  if body == nil then body, opts = opts, {} end
  return async(function()
    local env = { TBRT_HISTORY = opts.history or (dir .. "/history"), HOME = dir }
    for k, v in pairs(opts.env or {}) do env[k] = v end
    local p = pty.spawn(H.tbrt, opts.args or {}, { env = env })
    local ok, err = pcall(function()
      p:expect("tbrt> ")
      body(p)
    end)
    p:close()
    if not ok then error(err, 0) end
  end)
end

-- Type keys, wait until the line shows `shown` (default: the keys), press
-- Enter and wait for the prompt that follows the output. Returns the
-- output (the stream between the line and the next prompt).
local function eval(p, keys, shown)
  p:send(keys)
  shown = shown or keys
  p:wait_screen(function() return p:cursor_line():sub(-#shown) == shown end)
  -- redraws of the line may still come (the keys can arrive in pieces),
  -- but no line end until Enter
  p.mark = #p.stream
  p:send(K.enter)
  return p:expect("^[^\n]*\n(.-)tbrt> $", nil, true)
end

local function last_line(s) return s:match("([^\n]*)$") end

describe("the REPL in a terminal", function()
  setup(function() dir = H.tmpdir() end)
  teardown(function() H.rmtree(dir) end)

  it("evaluates lines and pretty-prints their values", repl(function(p)
    assert.equal("2\n", eval(p, "1+1"))
    assert.equal('{ 1, "two", t = { x = true } }\n', eval(p, '{ 1, "two", t = { x = true } }'))
    assert.equal('1\tnil\t"x\\ny"\n', eval(p, "1, nil, 'x\\ny'"))
    assert.equal("", eval(p, "t = {} t.self = t"))
    assert.equal("{ self = <cycle> }\n", eval(p, "t"))
    assert.equal("hi\n", eval(p, "print('hi')"))
    assert.matches("^<cdata int %[2%]: 0x%x+>\n$", eval(p, "require('ffi').new('int[2]')"))
    -- a table wider than the terminal breaks over lines
    local out = eval(p, "x = {} for i = 1, 30 do x['key' .. i] = i end return x")
    assert.matches("^{\n  key1 = 1,\n  key10 = 10,\n", out)
    for l in out:gmatch("[^\n]+") do assert.is_true(#l <= pty.WIDTH, l) end
    assert.equal("tbrt>", last_line(p:screen()))
    -- the width follows the terminal's
    p:resize(40)
    out = eval(p, "{ alpha = string.rep('a', 15), beta = string.rep('b', 15) }",
      "string.rep('b', 15) }")
    assert.equal(string.format('{\n  alpha = "%s",\n  beta = "%s",\n}\n', ("a"):rep(15), ("b"):rep(15)), out)
  end))

  it("prints an error with a short traceback and goes on", repl(function(p)
    local out = eval(p, "local function inner() error('boom') end inner()")
    assert.matches("^stdin:1: boom\nstack traceback:\n", out)
    assert.matches("in function 'inner'", out)
    assert.not_matches("eval%.lua", out)           -- tbrt's own frames are cut
    assert.not_matches("task%.lua", out)
    assert.matches("^stdin:1: unexpected symbol near '='\n$", eval(p, "x = = 1"))
    assert.equal("4\n", eval(p, "2+2"))
  end))

  it("continues an unfinished chunk on the next line with a continuation prompt", repl(function(p)
    p:send("function f(x)" .. K.enter)
    p:expect("...> ")
    assert.equal("...>", p:cursor_line())
    p:send("return x * 2" .. K.enter)
    p:expect("...> ")
    assert.equal("", eval(p, "end"))
    assert.equal("42\n", eval(p, "f(21)"))
    p:send("t = {" .. K.enter)
    p:expect("...> ")
    p:send("1, 2," .. K.enter)
    p:expect("...> ")
    assert.equal("", eval(p, "3 }"))
    assert.equal("3\n", eval(p, "#t"))
  end))

  it("edits the line: cursor moves, deletes, kills", repl(function(p)
    -- type "1+3", go left, delete the 3, type 2 at the end: 1+2
    assert.equal("3\n", eval(p, "1+3" .. K.left .. K.delete .. "2", "tbrt> 1+2"))
    -- Ctrl-A to the start, insert; Ctrl-E to the end, append
    assert.equal("80\n", eval(p, "+7" .. K.ctrl_a .. "10" .. K.ctrl_e .. "0", "tbrt> 10+70"))
    -- Home and End as escape sequences
    assert.equal("-1\n", eval(p, "1" .. K.home .. "-" .. K["end"], "tbrt> -1"))
    -- Ctrl-U kills what is before the cursor; Ctrl-W the word before it
    assert.equal("5\n", eval(p, "garbage" .. K.ctrl_u .. "5", "tbrt> 5"))
    assert.equal("6\n", eval(p, "6 junk" .. K.ctrl_w .. K.backspace, "tbrt> 6"))
    -- Ctrl-K kills to the end
    assert.equal("8\n", eval(p, "8 + nonsense" .. K.left:rep(10) .. K.ctrl_k, "tbrt> 8"))
    -- Ctrl-L clears the screen and draws the line again at the top
    p:send("9" .. K.ctrl_l)
    p:wait_screen(function(s) return s == "tbrt> 9" end)
    assert.equal("9\n", eval(p, "", "tbrt> 9"))
  end))

  it("recalls history with the arrows, and from the file in the next session", async(function()
    local hist = dir .. "/recall_history"
    os.remove(hist)
    local function session(body)
      local p = pty.spawn(H.tbrt, {}, { env = { TBRT_HISTORY = hist, HOME = dir } })
      local ok, err = pcall(function()
        p:expect("tbrt> ")
        body(p)
        p:send(K.ctrl_d)
        assert.equal(0, p:wait_exit())
      end)
      p:close()
      if not ok then error(err, 0) end
    end
    session(function(p)
      assert.equal("42\n", eval(p, "6*7"))
      assert.equal("9\n", eval(p, "3*3"))
      p:send(K.up .. K.up)
      p:wait_screen(function() return p:cursor_line() == "tbrt> 6*7" end)
      p:send(K.down)
      p:wait_screen(function() return p:cursor_line() == "tbrt> 3*3" end)
      p:send(K.down)               -- back to the line being typed (empty)
      p:wait_screen(function() return p:cursor_line() == "tbrt>" end)
      assert.equal("42\n", eval(p, K.up .. K.up, "tbrt> 6*7"))
    end)
    assert.equal("6*7\n3*3\n6*7\n", H.read_file(hist))
    session(function(p)
      assert.equal("42\n", eval(p, K.up, "tbrt> 6*7"))
    end)
  end))

  it("completes globals, fields and a link's methods with Tab", repl(function(p)
    assert.equal("", eval(p, "a, b = pair{ device = 'soft0' }"))
    p:send("a:sta" .. K.tab)
    p:wait_screen(function() return p:cursor_line() == "tbrt> a:stats" end)
    p:send(K.ctrl_u .. "a:s" .. K.tab)
    -- more than one way on: the candidates are listed, the line stays
    p:wait_screen("\nsend%s+send_view%s+settimeouts%s+stats\ntbrt> a:s$")
    p:send(K.ctrl_u .. "tbrt.conn" .. K.tab)
    p:wait_screen(function() return p:cursor_line() == "tbrt> tbrt.connect" end)
    p:send(K.ctrl_u .. "pai" .. K.tab)
    p:wait_screen(function() return p:cursor_line() == "tbrt> pair" end)
    assert.matches("^<link %d+ soft0 apple%-uc RTS sent=0B recv=0B>\n$", eval(p, K.ctrl_u .. "a", "tbrt> a"))
  end))

  it("keeps the prompt whole when a timer prints while it is idle", repl(function(p)
    eval(p, "t = uv.new_timer() t:start(300, 0, function() print('tick') end)")
    p:send("12")
    p:wait_screen("\ntick\ntbrt> 12$")
    assert.equal("tbrt> 12", p:cursor_line())
    -- what was typed before the timer fired is still there to finish
    assert.equal("123\n", eval(p, "3", "tbrt> 123"))
    -- output without a line end gets one before the prompt comes back
    eval(p, "t:start(100, 0, function() io.write('partial') end)")
    p:wait_screen("\npartial\ntbrt>$")
  end))

  it("cancels a pending recv with Ctrl-C and answers again", repl(function(p)
    assert.equal("", eval(p, "a, b = pair{ device = 'soft0' }"))
    p:send("a:recv(5)" .. K.enter)
    p:expect("a:recv(5)\n")
    -- the line waits: no prompt comes back by itself
    assert.equal("", p:settle(0.3))
    local t0 = H.now()
    p:send(K.ctrl_c)
    p:expect("canceled\n")
    p:expect("tbrt> ")
    assert.is_true(H.now() - t0 < 2, "Ctrl-C took " .. (H.now() - t0) .. " s")
    assert.equal("2\n", eval(p, "1+1"))
    -- SIGINT sent by kill does the same as the key (raw mode turns the key
    -- into a byte; the signal must not end the REPL either)
    p:send("task.sleep(30)" .. K.enter)
    p:expect("task.sleep(30)\n")
    p.proc:kill("sigint")
    p:expect("canceled\ntbrt> ")
    -- the loop went on meanwhile: the links still work
    assert.equal('"hello"\n', eval(p, "b:send('hello') b:flush() return a:recv(5, 5)"))
  end))

  it("drops the typed line and an unfinished chunk on Ctrl-C at the prompt", repl(function(p)
    p:send("function g()" .. K.enter)
    p:expect("...> ")
    p:send("half typed" .. K.ctrl_c)
    p:expect("^C\ntbrt> ")
    assert.equal("1\n", eval(p, "1"))
    assert.equal("nil\n", eval(p, "g"))
    -- a second Ctrl-C on an empty line: a hint, never an exit
    p:send(K.ctrl_c .. K.ctrl_c)
    p:expect("Ctrl-D")
    assert.is_nil(p.code)
    assert.equal("7\n", eval(p, "7"))
  end))

  it("keeps keys typed while a line runs for the prompt that follows", repl(function(p)
    p:send("task.sleep(0.3) print('woke')" .. K.enter .. "1+1" .. K.enter)
    p:expect("woke\n")
    p:expect("tbrt> 1+1\n2\ntbrt> ")
  end))

  it("reports failures outside a line (a task nobody joins, a luv callback) and goes on", repl(function(p)
    eval(p, "task.spawn(function() task.sleep(0.05) error('orphan broke') end)")
    p:expect("task %d+ failed: stdin:1: orphan broke\n", nil, true)
    eval(p, "t = uv.new_timer() t:start(50, 0, function() error('callback broke') end)")
    p:expect("error in a callback: stdin:1: callback broke\n", nil, true)
    assert.equal("3\n", eval(p, "1+2"))
  end))

  it("exits 0 on Ctrl-D, closing links and the terminal's raw mode, timers or not", repl(function(p)
    eval(p, "a, b = pair{ device = 'soft0' }")
    -- see the REPL close the link: a's close says so
    eval(p, "c = a.close a.close = function(...) print('closing a') return c(...) end")
    eval(p, "forever = uv.new_timer() forever:start(50, 50, function() end)")
    local raw = p:lflag()
    assert.equal(0, bit.band(raw, pty.ICANON + pty.ECHO), "raw mode while the REPL runs")
    p:send(K.ctrl_d)
    p:expect("closing a\n")
    assert.equal(0, p:wait_exit())
    assert.equal(pty.ICANON + pty.ECHO, bit.band(p:lflag(), pty.ICANON + pty.ECHO))
  end))

  it("exits with os.exit's code and restores the terminal", repl(function(p)
    p:send("os.exit(3)" .. K.enter)
    assert.equal(3, p:wait_exit())
    assert.equal(pty.ICANON + pty.ECHO, bit.band(p:lflag(), pty.ICANON + pty.ECHO))
  end))

  it("runs the script first with -i and keeps its globals", async(function()
    local s = H.write_file(dir .. "/setup.lua", "x = 41\nprint('script ran', ...)\n")
    local p = pty.spawn(H.tbrt, { "-i", s, "arg1" }, { env = { TBRT_HISTORY = dir .. "/h", HOME = dir } })
    local ok, err = pcall(function()
      p:expect("script ran\targ1\n")
      p:expect("tbrt> ")
      assert.equal("42\n", eval(p, "x + 1"))
      p:send(K.ctrl_d)
      assert.equal(0, p:wait_exit())
    end)
    p:close()
    if not ok then error(err, 0) end
  end))

  it("has help() and help(obj)", repl(function(p)
    local out = eval(p, "help()")
    assert.matches("pair{device=, child=, ...}", out, 1, true)
    assert.matches("Ctrl%-D", out)
    eval(p, "a, b = pair{ device = 'soft0' }")
    out = eval(p, "help(a)")
    assert.matches("^a link: <link", out)
    assert.matches("\n  recv%(n %[, timeout%]%)%s+exactly n bytes", out)
  end))
end)

---------------------------------------------------------------------------

describe("the pretty printer", function()
  local pretty = require("tbrt.repl.pretty")

  it("sorts keys, quotes strings, marks cycles and fits the width", function()
    assert.equal('{ 1, 2, a = "x", b = { c = true }, ["not id"] = 1, [true] = 0 }',
      pretty.format({ 1, 2, b = { c = true }, a = "x", ["not id"] = 1, [true] = 0 }))
    local t = { name = "t" }
    t.me, t.list = t, { t }
    assert.equal('{ list = { <cycle> }, me = <cycle>, name = "t" }', pretty.format(t))
    local shared = { 1 }
    assert.equal("{ a = { 1 }, b = { 1 } }", pretty.format({ a = shared, b = shared }))
    local wide = { alpha = string.rep("a", 30), beta = string.rep("b", 30) }
    assert.equal(string.format('{\n  alpha = "%s",\n  beta = "%s",\n}', wide.alpha, wide.beta),
      pretty.format(wide, { width = 40 }))
    assert.equal('"tab\\there\\0\\255"', pretty.format("tab\there\0\255"))
    assert.equal('"héllo"', pretty.format("héllo"))
    assert.equal("{...}", pretty.format({ { { 1 } } }, { depth = 0 }))
  end)

  it("shows cdata by type and address, and tbrt objects by their names", function()
    require("tbrt.ffi")
    assert.matches("^<cdata struct tbrt_link %*: NULL>$", pretty.format(ffi.new("tbrt_link *")))
    assert.equal("10ULL", pretty.format(ffi.new("uint64_t", 10)))
    local t = task.spawn(function() end)
    assert.matches("^task %d+ %(ready%)$", pretty.format(t))
    task.run(function() t:join(1) end)
    local verbs = require("tbrt.verbs")
    local dev = assert(verbs.open("soft0"))
    local text = pretty.format(dev)
    dev:close()
    assert.matches("^<device soft0 apple%-uc port1=DOWN port2=ACTIVE>\n", text)
    assert.matches("\n  port 2 ACTIVE mtu %d+\n", text)
    assert.matches("\n    gid %d+ ::ffff:127%.0%.0%.1", text)
  end)
end)

describe("the key decoder", function()
  local keys = require("tbrt.repl.keys")

  local function names(evs)
    local out = {}
    for _, e in ipairs(evs) do out[#out + 1] = e.key == "text" and ("text:" .. e.text) or e.key end
    return table.concat(out, " ")
  end

  it("names control keys and escape sequences, and keeps a split sequence", function()
    local d = keys.decoder()
    assert.equal("text:ab left right home end delete enter ctrl-c",
      names(d:feed("ab\27[D\27[C\27[H\27OF\27[3~\r\3")))
    assert.equal("home end word-left word-right backspace tab",
      names(d:feed("\27[1~\27[4~\27[1;5D\27f\127\t")))
    assert.equal("", names(d:feed("\27[")))
    assert.is_true(d:pending())
    assert.equal("up text:é", names(d:feed("A\195")) .. " " .. names(d:feed("\169")))
    assert.equal("", names(d:feed("\27")))
    assert.equal("escape", names(d:flush()))
    assert.equal("text:x", names(d:feed("\27[99Zx")))    -- unknown: dropped whole
  end)
end)

describe("completion", function()
  local complete = require("tbrt.repl.complete")

  it("completes globals, fields through __index chains, and only methods after ':'", function()
    local Class = { __index = { send = function() end, stats = function() end, size = 1 } }
    local env = { obj = setmetatable({ state = "x" }, Class), other = 1, nested = { deep = { leaf = 1 } } }
    assert.same({ part = "o", names = { "obj", "or", "other" } }, complete.at("x = o", env))
    assert.same({ "send", "size", "state", "stats" }, complete.at("obj.s", env).names)
    assert.same({ "send", "stats" }, complete.at("obj:s", env).names)
    assert.same({ "leaf" }, complete.at("f(nested.deep.l", env).names)
    assert.same({}, complete.at("missing.x", env).names)
    assert.equal("se", complete.common({ "send", "settimeouts" }))
  end)
end)

describe("history", function()
  local history = require("tbrt.repl.history")

  it("skips blanks and repeats, and keeps the newest max lines in the file", function()
    local d = H.tmpdir()
    local path = d .. "/h"
    local h = history.open(path, 3)
    for _, l in ipairs({ "a", "", "b", "b", "c", "d", "e", "f" }) do h:add(l) end
    assert.same({ "d", "e", "f" }, h.lines)
    -- the file grew to twice the bound and was cut back to the newest lines
    assert.equal("d\ne\nf\n", H.read_file(path))
    assert.same({ "d", "e", "f" }, history.open(path, 3).lines)
    H.rmtree(d)
  end)
end)

describe("pair{} and help(obj)", function()
  local play = require("tbrt.repl.play")
  local help_text = require("tbrt.repl.help_text")
  local link = require("tbrt.link")

  it("makes a pair in this process and with a child echo peer", async(function()
    local a, b = assert(play.pair({ device = "soft1" }))
    assert.equal("ready", a:info().state)
    assert(b:send("ping"))
    assert(b:flush())
    assert.equal("ping", a:recv(4, 5))
    a:close()
    b:close()
    local c, peer = play.pair({ device = "soft1", child = true })
    assert(c, peer)
    assert.matches("^<peer process %d+ echo running>$", tostring(peer))
    assert(c:send("echo me"))
    assert(c:flush())
    assert.equal("echo me", c:recv(7, 10))
    c:close()
    assert.equal(0, (peer:wait(10)))
    assert.matches("echo peer ready: <link", peer:output())
    assert.has_error(function() play.pair({ devcie = "soft1" }) end)
  end))

  it("describes every public method of a link", async(function()
    local a, b = assert(play.pair({ device = "soft0" }))
    local text = table.concat(help_text.describe(a), "\n")
    for name, fn in pairs(link.Link) do
      if type(fn) == "function" and not name:match("^_") then
        assert.matches("\n  " .. name .. "%(", text)
      end
    end
    assert.not_matches("no description", text)
    a:close()
    b:close()
    assert.matches("nil: nothing", help_text.describe(nil)[1])
  end))
end)
