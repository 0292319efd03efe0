-- SPDX-License-Identifier: Apache-2.0
-- Helpers shared by the templates: a code builder, C literals and index arithmetic.
-- Every extent is a compile-time constant, so index expressions are printed with the
-- numbers baked in; only the batch index `n` and the thread/block indices are variables.
local lib = {}

-- ---- code builder -------------------------------------------------------------------
local Code = {}
Code.__index = Code

function lib.code()
  return setmetatable({ lines = {}, depth = 0 }, Code)
end

-- code:line("x = %d;", 3)  (no format arguments: the text is used as is)
function Code:line(fmt, ...)
  local text = select("#", ...) > 0 and string.format(fmt, ...) or fmt
  self.lines[#self.lines + 1] = string.rep("    ", self.depth) .. text
  return self
end

function Code:open(fmt, ...)
  self:line(fmt, ...)
  self.depth = self.depth + 1
  return self
end

function Code:close(fmt, ...)
  self.depth = self.depth - 1
  self:line(fmt or "}", ...)
  return self
end

function Code:blank()
  self.lines[#self.lines + 1] = ""
  return self
end

function Code:append(other)
  for _, l in ipairs(other.lines) do
    self.lines[#self.lines + 1] = (l == "" and "" or string.rep("    ", self.depth) .. l)
  end
  return self
end

function Code:text()
  return table.concat(self.lines, "\n") .. "\n"
end

-- ---- literals -----------------------------------------------------------------------
-- A float literal that round-trips the double value to the nearest float.
function lib.flit(x)
  if x ~= x then return "__int_as_float(0x7fc00000)" end
  if x == math.huge then return "__int_as_float(0x7f800000)" end
  if x == -math.huge then return "__int_as_float(0xff800000)" end
  local s = string.format("%.9g", x)
  if not s:find("[%.eEn]") then s = s .. ".0" end
  return s .. "f"
end

function lib.dlit(x)
  local s = string.format("%.17g", x)
  if not s:find("[%.eEn]") then s = s .. ".0" end
  return s
end

-- ---- registry snippets ------------------------------------------------------------------
-- Fills the placeholders {name} of a snippet from the registry (gen/op_registry.c): names in
-- `vars` (C expressions: variables, accumulator arrays) first, then the op's fields as
-- float literals. An unknown placeholder is a registry bug, reported as such.
function lib.fill(text, op, vars)
  return (text:gsub("{([%w_]+)}", function(name)
    local v = vars[name]
    if v ~= nil then return v end
    v = op and op.f[name]
    if type(v) == "number" then return lib.flit(v) end
    error(string.format("snippet of %s: no value for {%s} in %q", op and op.spec_name or "?", name, text))
  end))
end

-- Prints a multi-line snippet, each line at the builder's depth plus its own indentation.
function lib.emit(code, text)
  for l in (text .. "\n"):gmatch("([^\n]*)\n") do code:line(l) end
end

-- ---- shapes and indices -------------------------------------------------------------
-- Shapes come from C as { rank, dim = {[0]=1, ...}, sample }. Coordinates are arrays
-- indexed by dim (coords[1] is the channel), holding C expressions.

-- Row-major strides of a shape within one sample.
function lib.strides(shape)
  local st, s = {}, 1
  for d = shape.rank - 1, 1, -1 do
    st[d] = s
    s = s * shape.dim[d]
  end
  return st
end

-- Per-sample linear index of `coords` in `shape`: c1*S1 + c2*S2 + ...
function lib.lin(shape, coords)
  local st = lib.strides(shape)
  local terms = {}
  for d = 1, shape.rank - 1 do
    local c = coords[d]
    if c ~= "0" and shape.dim[d] ~= 1 then
      terms[#terms + 1] = st[d] == 1 and c or string.format("(%s) * %d", c, st[d])
    end
  end
  if #terms == 0 then return "0" end
  return table.concat(terms, " + ")
end

-- Declares coordinate variables `<prefix>1..` for the per-sample linear index `idx` and
-- returns their names.
function lib.unravel(code, shape, idx, prefix)
  local st = lib.strides(shape)
  local coords = {}
  for d = 1, shape.rank - 1 do
    if shape.dim[d] == 1 then
      coords[d] = "0"
    else
      local name = prefix .. d
      local e = st[d] == 1 and idx or string.format("(%s / %d)", idx, st[d])
      if d > 1 then e = string.format("%s %% %d", e, shape.dim[d]) end
      code:line("const int %s = %s;", name, e)
      coords[d] = name
    end
  end
  return coords
end

function lib.map(t, f)
  local r = {}
  for i, v in ipairs(t) do r[i] = f(v) end
  return r
end

return lib
