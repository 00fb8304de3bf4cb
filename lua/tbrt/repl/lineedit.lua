-- tbrt/repl/lineedit.lua - the REPL's line editor: one line of text, a cursor,
-- history recall and completion, drawn on a terminal in raw mode.
--
--   local ed = lineedit.new{ write = raw_write, width = function() return 80 end,
--                            history = h, complete = function(before) ... end }
--   ed:start("tbrt> ")
--   local what, line = ed:key(ev)     -- ev from tbrt.repl.keys; what: nil, "line",
--                                     -- "eof", "interrupt"
--   ed:hide() ... ed:show()           -- around output that is not the editor's
--
-- Keys (emacs/readline defaults): Left/Right, Ctrl-B/F, Home/End, Ctrl-A/E,
-- Ctrl/Alt-Left/Right and Alt-B/F by words, Backspace, Delete, Ctrl-D
-- (delete; on an empty line: "eof"), Ctrl-K/U (kill to end/start), Ctrl-W
-- and Alt-Backspace (kill the word before), Alt-D (the word after), Up/Down
-- and Ctrl-P/N (history), Tab (complete; when nothing more can be added,
-- list the candidates), Ctrl-L (clear the screen), Ctrl-C ("interrupt").
--
-- The line never wraps: when it is wider than the terminal the editor
-- scrolls it sideways to keep the cursor in view. Text is UTF-8 and moves
-- go by characters (one column each: wide and combining characters are
-- not measured).
local M = {}

local CSI = "\27["
local CLEAR_TO_END = CSI .. "K"
local CLEAR_SCREEN = CSI .. "H" .. CSI .. "2J"
-- Columns kept free at the right edge: writing the last column makes some
-- terminals wrap early.
local RIGHT_MARGIN = 1
-- Narrowest text window when the prompt takes most of a tiny terminal.
local MIN_WINDOW = 8

local Editor = {}
Editor.__index = Editor

function M.new(opts)
  assert(type(opts.write) == "function", "lineedit.new: write function needed")
  return setmetatable({
    write = opts.write,
    width = opts.width or function() return 80 end,
    history = opts.history or { lines = {} },
    complete = opts.complete,
    prompt = "", buf = "", pos = 0, scroll = 0, shown = false,
  }, Editor)
end

local function is_cont(b) return b and b >= 0x80 and b < 0xC0 end

-- Columns of a string: characters, not bytes.
local function cols(s) return #s - select(2, s:gsub("[\128-\191]", "")) end
M.cols = cols

-- Characters i..j (1-based, inclusive) of s.
local function char_sub(s, i, j)
  local out, k = {}, 0
  for ch in s:gmatch("[^\128-\191][\128-\191]*") do
    k = k + 1
    if k > j then break end
    if k >= i then out[#out + 1] = ch end
  end
  return table.concat(out)
end

function Editor:_prev(p)
  repeat p = p - 1 until p <= 0 or not is_cont(self.buf:byte(p + 1))
  return math.max(p, 0)
end

function Editor:_next(p)
  local n = #self.buf
  repeat p = p + 1 until p >= n or not is_cont(self.buf:byte(p + 1))
  return math.min(p, n)
end

-- Word boundaries: letters, digits and _ make words.
function Editor:_word_left(p)
  local b = self.buf
  while p > 0 and not b:sub(p, p):match("[%w_\128-\255]") do p = p - 1 end
  while p > 0 and b:sub(p, p):match("[%w_\128-\255]") do p = p - 1 end
  return p
end

function Editor:_word_right(p)
  local b, n = self.buf, #self.buf
  while p < n and not b:sub(p + 1, p + 1):match("[%w_\128-\255]") do p = p + 1 end
  while p < n and b:sub(p + 1, p + 1):match("[%w_\128-\255]") do p = p + 1 end
  return p
end

---------------------------------------------------------------------------
-- Drawing.

function Editor:_window()
  return math.max(self.width() - cols(self.prompt) - RIGHT_MARGIN, MIN_WINDOW)
end

-- Draw the prompt and the visible part of the line, cursor in place.
function Editor:show()
  local avail = self:_window()
  local cur, total = cols(self.buf:sub(1, self.pos)), cols(self.buf)
  if total <= avail then
    self.scroll = 0
  elseif cur < self.scroll then
    self.scroll = cur
  elseif cur > self.scroll + avail then
    self.scroll = cur - avail
  end
  local visible = self.scroll == 0 and total <= avail and self.buf or
    char_sub(self.buf, self.scroll + 1, self.scroll + avail)
  local col = cols(self.prompt) + cur - self.scroll
  self.write("\r" .. self.prompt .. visible .. CLEAR_TO_END .. "\r" ..
    (col > 0 and (CSI .. col .. "C") or ""))
  self.shown = true
end

-- Erase the prompt line (the cursor ends at its start).
function Editor:hide()
  if self.shown then self.write("\r" .. CLEAR_TO_END) end
  self.shown = false
end

-- A new, empty line after prompt.
function Editor:start(prompt)
  self.prompt, self.buf, self.pos, self.scroll = prompt, "", 0, 0
  self.hist_i, self.saved = nil, nil
  self:show()
end

-- Leave the line on screen as typed and go to the next one. A line that
-- was scrolled sideways is written out whole (the terminal wraps it), so
-- what scrolls up is what was entered.
function Editor:finish(suffix)
  if not self.shown then return end
  if self.scroll > 0 or cols(self.buf) > self:_window() then
    self.write("\r" .. self.prompt .. self.buf .. CLEAR_TO_END)
  end
  self.write((suffix or "") .. "\n")
  self.shown = false
end

---------------------------------------------------------------------------
-- Editing.

function Editor:insert(text)
  self.buf = self.buf:sub(1, self.pos) .. text .. self.buf:sub(self.pos + 1)
  self.pos = self.pos + #text
end

function Editor:_delete(from, to)       -- bytes from+1 .. to
  if to <= from then return end
  self.buf = self.buf:sub(1, from) .. self.buf:sub(to + 1)
  self.pos = from
end

function Editor:_recall(delta)
  local lines = self.history.lines
  local i = self.hist_i
  if delta < 0 then
    if i == nil then
      if #lines == 0 then return end
      self.saved, i = self.buf, #lines
    elseif i > 1 then
      i = i - 1
    else
      return
    end
  else
    if i == nil then return end
    i = i + 1
    if i > #lines then i = nil end
  end
  self.hist_i = i
  self.buf = i and lines[i] or self.saved or ""
  self.pos = #self.buf
end

-- The candidates in columns under the line, then the line again.
function Editor:_list(names)
  local w = 0
  for _, n in ipairs(names) do w = math.max(w, cols(n)) end
  w = w + 2
  local per_row = math.max(1, math.floor(self.width() / w))
  local rows = {}
  for i, n in ipairs(names) do
    local r = math.floor((i - 1) / per_row) + 1
    rows[r] = (rows[r] or "") .. n .. string.rep(" ", w - cols(n))
  end
  for i, r in ipairs(rows) do rows[i] = r:gsub("%s+$", "") end
  self:finish()
  self.write(table.concat(rows, "\n") .. "\n")
end

function Editor:_complete()
  if not self.complete then return end
  local ok, c = pcall(self.complete, self.buf:sub(1, self.pos))
  if not ok or #c.names == 0 then return end
  local common = c.names[1]
  if #c.names > 1 then common = require("tbrt.repl.complete").common(c.names) end
  if #common > #c.part then
    self:insert(common:sub(#c.part + 1))
  elseif #c.names > 1 then
    self:_list(c.names)
  end
end

local MOVES = {
  left = function(e) return e:_prev(e.pos) end,
  right = function(e) return e:_next(e.pos) end,
  home = function() return 0 end,
  ["ctrl-a"] = function() return 0 end,
  ["end"] = function(e) return #e.buf end,
  ["ctrl-e"] = function(e) return #e.buf end,
  ["word-left"] = function(e) return e:_word_left(e.pos) end,
  ["word-right"] = function(e) return e:_word_right(e.pos) end,
}

-- Handle one key event. Returns "line", text (Enter), "eof" (Ctrl-D on an
-- empty line), "interrupt" (Ctrl-C), or nil (the editor handled it).
function Editor:key(ev)
  local k = ev.key
  if MOVES[k] then
    self.pos = MOVES[k](self)
  elseif k == "text" then
    self:insert(ev.text)
  elseif k == "enter" then
    local line = self.buf
    self:finish()
    return "line", line
  elseif k == "ctrl-c" then
    return "interrupt"
  elseif k == "ctrl-d" then
    if self.buf == "" then return "eof" end
    self:_delete(self.pos, self:_next(self.pos))
  elseif k == "delete" then
    self:_delete(self.pos, self:_next(self.pos))
  elseif k == "backspace" then
    self:_delete(self:_prev(self.pos), self.pos)
  elseif k == "ctrl-k" then
    self:_delete(self.pos, #self.buf)
  elseif k == "ctrl-u" then
    self:_delete(0, self.pos)
  elseif k == "ctrl-w" then
    local p = self.pos
    while p > 0 and self.buf:sub(p, p):match("%s") do p = p - 1 end
    while p > 0 and not self.buf:sub(p, p):match("%s") do p = p - 1 end
    self:_delete(p, self.pos)
  elseif k == "backspace-word" then
    self:_delete(self:_word_left(self.pos), self.pos)
  elseif k == "kill-word" then
    local from = self.pos
    self:_delete(from, self:_word_right(from))
  elseif k == "up" or k == "down" then
    self:_recall(k == "up" and -1 or 1)
  elseif k == "tab" then
    self:_complete()
  elseif k == "ctrl-l" then
    self.write(CLEAR_SCREEN)
  else
    return nil                          -- escape and keys without a binding
  end
  self:show()
  return nil
end

return M
