-- tbrt/repl/keys.lua - turn the bytes a terminal sends in raw mode into key
-- events for the line editor (tbrt.repl.lineedit).
--
--   local dec = keys.decoder()
--   for _, k in ipairs(dec:feed(bytes)) do ... end  -- { key = "left" } or { key = "text", text = "abc" }
--
-- Escape sequences are the ones xterm and the Linux console send (ECMA-48
-- CSI "ESC [ params final" and SS3 "ESC O final"); the same key often has
-- several spellings (Home: ESC[H, ESC[1~, ESC[7~, ESC OH), all mapped to one
-- name. A sequence split across two reads is kept until the rest arrives;
-- a lone ESC stays pending until dec:flush() (the editor calls it after a
-- short quiet time). Unknown sequences are dropped whole, never typed in.
local M = {}

local ESC = "\27"

-- Control bytes (Ctrl-<letter> is the letter's code minus 64).
local CONTROL = {
  [1] = "ctrl-a", [2] = "left", [3] = "ctrl-c", [4] = "ctrl-d", [5] = "ctrl-e",
  [6] = "right", [8] = "backspace", [9] = "tab", [10] = "enter", [11] = "ctrl-k",
  [12] = "ctrl-l", [13] = "enter", [14] = "down", [16] = "up", [21] = "ctrl-u",
  [23] = "ctrl-w", [127] = "backspace",
}

-- Final byte of a CSI or SS3 sequence without a number.
local FINAL = { A = "up", B = "down", C = "right", D = "left", H = "home", F = "end" }

-- CSI <n> ~ (VT220 editing keys).
local TILDE = { ["1"] = "home", ["7"] = "home", ["4"] = "end", ["8"] = "end", ["3"] = "delete" }

-- Arrows with a modifier (CSI 1;<mod> C|D): Ctrl (5) and Alt (3) move by words.
local WORD = { C = "word-right", D = "word-left" }

-- Alt-<key>: ESC then the key.
local ALT = { b = "word-left", f = "word-right", d = "kill-word", ["\127"] = "backspace-word",
  ["\8"] = "backspace-word" }

local Decoder = {}
Decoder.__index = Decoder

function M.decoder()
  return setmetatable({ rest = "" }, Decoder)
end

-- Length of a complete UTF-8 character starting with byte b (1 for
-- anything that is not a lead byte, so bad input still advances).
local function utf8_len(b)
  if b >= 0xF0 and b < 0xF8 then return 4 end
  if b >= 0xE0 then return b < 0xF0 and 3 or 1 end
  if b >= 0xC0 then return 2 end
  return 1
end

-- One escape sequence at s[i] == ESC. Returns the event (or false for a
-- sequence to drop) and the index after it, or nil if s ends inside it.
local function escape(s, i)
  local c = s:sub(i + 1, i + 1)
  if c == "" then return nil end
  if c == "[" then
    local params, final, after = s:match("^([0-9;]*)([\64-\126])()", i + 2)
    if not params then
      if s:find("^[0-9;]*$", i + 2) then return nil end        -- not finished yet
      return false, i + 2                                      -- garbage: drop ESC [
    end
    if final == "~" then return TILDE[params] and { key = TILDE[params] } or false, after end
    local mod = params:match("^1;(%d+)$")
    if mod and (mod == "5" or mod == "3") and WORD[final] then return { key = WORD[final] }, after end
    return FINAL[final] and { key = FINAL[final] } or false, after
  elseif c == "O" then
    local final = s:sub(i + 2, i + 2)
    if final == "" then return nil end
    return FINAL[final] and { key = FINAL[final] } or false, i + 3
  end
  return ALT[c] and { key = ALT[c] } or false, i + 2
end

-- Decode what arrived; returns the list of events. Runs of printable
-- characters come as one { key = "text" } event (a paste stays cheap).
function Decoder:feed(bytes)
  local s = self.rest .. bytes
  self.rest = ""
  local out, i, n = {}, 1, #s
  local function text(t)
    local last = out[#out]
    if last and last.key == "text" then last.text = last.text .. t else out[#out + 1] = { key = "text", text = t } end
  end
  while i <= n do
    local b = s:byte(i)
    if b == 27 then
      local ev, after = escape(s, i)
      if ev == nil then self.rest = s:sub(i) break end
      if ev then out[#out + 1] = ev end
      i = after
    elseif b < 32 or b == 127 then
      if CONTROL[b] then out[#out + 1] = { key = CONTROL[b] } end
      i = i + 1
    else
      local len = utf8_len(b)
      if i + len - 1 > n then self.rest = s:sub(i) break end
      text(s:sub(i, i + len - 1))
      i = i + len
    end
  end
  return out
end

-- Something is waiting for more bytes (a lone ESC, half a sequence).
function Decoder:pending() return self.rest ~= "" end

-- Give up waiting: a lone ESC is the Escape key; half a sequence is dropped.
function Decoder:flush()
  local r = self.rest
  self.rest = ""
  if r == ESC then return { { key = "escape" } } end
  return {}
end

return M
