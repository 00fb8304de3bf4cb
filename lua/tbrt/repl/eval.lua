-- tbrt/repl/eval.lua - Lua chunks entered a line at a time, as the REPL and
-- piped stdin give them: gather lines until they make a chunk, compile it
-- (an expression first, so its value can be shown), and run it as a task.
--
--   local ch = eval.chunk("=stdin")
--   local r, err = ch:add(line)   -- a function, "incomplete", "empty", or nil, err
--   local t = eval.spawn(fn, function(out) ... end)
--     -- out = { ok = true, n = 2, "a", "b" } or { ok = false, error = e, message = text }
--
-- Like lua's own REPL: a line is tried as `return <line>` first; a chunk
-- that ends too early ("... near '<eof>'") waits for more lines; a line
-- starting with "=" is an expression (Lua 5.1's shorthand). Chunks run with
-- the globals (locals end with their chunk). Each runs as a task of its
-- own, so it may wait (link:recv, task.sleep) while the loop goes on.
local task = require("tbrt.task")

local M = {}

local unpack = unpack or table.unpack
local function pack(...) return { n = select("#", ...), ... } end

local THIS_FILE = debug.getinfo(1, "S").short_src

-- The compiler's message for a chunk cut short ends with '<eof>'. LuaJIT
-- says that of a quoted string left open too, but a newline cannot close
-- one (only a long [[string]] goes on over lines).
local function incomplete(err)
  return err:sub(-7) == "'<eof>'" and not err:find("unfinished string near", 1, true)
end

local Chunk = {}
Chunk.__index = Chunk

function M.chunk(name)
  return setmetatable({ name = name or "=stdin", lines = {} }, Chunk)
end

-- Lines waiting for the rest of their chunk.
function Chunk:pending() return #self.lines > 0 end

function Chunk:reset() self.lines = {} end

-- The chunk as an expression, else as statements. On failure: nil, the
-- statements' message, and whether either reading ran out of input (an
-- expression such as "{" or "1 +" goes on on the next line too).
--
-- The expression is passed through a function rather than returned as it
-- is: `return error("x")` would be a tail call, and a tail call loses the
-- caller's position ("stdin:1:") and frame. The newline keeps a trailing
-- comment from hiding the closing parenthesis.
local function compile(code, name)
  if code:sub(1, 1) == "=" then code = code:sub(2) end
  local fn = loadstring("return (function(...) return ... end)(" .. code .. "\n)", name)
  if fn then return fn end
  local err
  fn, err = loadstring(code, name)
  if fn then return fn end
  local _, rerr = loadstring("return " .. code, name)
  return nil, err, incomplete(err) or incomplete(rerr)
end

-- Add a line. Returns the compiled chunk (the lines so far are used up),
-- "incomplete" (more lines needed), "empty" (nothing to run), or nil and
-- the compiler's message.
function Chunk:add(line)
  if #self.lines == 0 and line:match("^%s*$") then return "empty" end
  self.lines[#self.lines + 1] = line
  local fn, err, more = compile(table.concat(self.lines, "\n"), self.name)
  if not fn and more then return "incomplete" end
  self.lines = {}
  if not fn then return nil, err end
  return fn
end

-- The input ended: compile what is left as it is (nil if nothing is).
function Chunk:finish()
  if #self.lines == 0 then return nil end
  local code = table.concat(self.lines, "\n")
  self.lines = {}
  local fn, err = compile(code, self.name)
  if fn then return fn end
  return nil, err
end

-- The traceback of an error in a chunk, down to the chunk itself (the
-- frames of this file and the scheduler below it say nothing to the user).
local function short_traceback(level)
  local tb = task.traceback(level + 1)
  local cut = tb:find("\n%s*%[C%]: in function 'xpcall'\n%s*" .. THIS_FILE:gsub("%p", "%%%0") .. ":")
  if cut then tb = tb:sub(1, cut - 1) end
  return tb
end

-- Run fn as a task; done(out) is called in that task when fn has
-- returned (out.ok, out.n, the values) or raised (out.error is the error
-- value, out.message the text with its traceback). Returns the task.
function M.spawn(fn, done)
  return task.spawn(function()
    local tb
    local r = pack(xpcall(fn, function(e)
      tb = short_traceback(2)
      return e
    end))
    if r[1] then
      done({ ok = true, n = r.n - 1, unpack(r, 2, r.n) })
    else
      local e = r[2]
      local text = type(e) == "string" and e or nil
      if text == nil then
        local ok, s = pcall(require("tbrt.repl.pretty").format, e)
        text = "(error object is " .. (ok and s or type(e)) .. ")"
      end
      done({ ok = false, error = e, message = text .. (tb and ("\n" .. tb) or "") })
    end
  end)
end

return M
