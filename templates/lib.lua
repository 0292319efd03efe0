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

-- Whether `shape`'s spatial dims are the extents coords.px numbers outputs over (see lin_with).
local function spans_px(shape, coords)
  if not coords.px or #coords ~= shape.rank - 1 then return false end
  for d = 2, shape.rank - 1 do
    if shape.dim[d] ~= coords.px_dims[d] then return false end
  end
  return true
end

-- sum of coords[d] * strides[d] over the sample's dims, leaving out zeros and extent-1 dims.
-- Coordinates may also carry `px`, the output's number within the sample over the spatial
-- extents `px_dims` (row-major, as the wgmma engine numbers its rows): a shape with exactly
-- those extents has its spatial dims contiguous in that order in either layout, so they are
-- one term, px times the innermost spatial stride, instead of a term per dim recovered from
-- px by divisions
local function lin_with(shape, coords, st)
  local terms = {}
  local function term(c, stride) terms[#terms + 1] = stride == 1 and c or string.format("(%s) * %d", c, stride) end
  local px = spans_px(shape, coords) and shape.rank > 2
  for d = 1, px and 1 or shape.rank - 1 do
    if coords[d] ~= "0" and shape.dim[d] ~= 1 then term(coords[d], st[d]) end
  end
  if px then term(coords.px, st[shape.rank - 1]) end
  if #terms == 0 then return "0" end
  return table.concat(terms, " + ")
end

-- Per-sample linear index of `coords` in `shape`: c1*S1 + c2*S2 + ...
function lib.lin(shape, coords) return lin_with(shape, coords, lib.strides(shape)) end

-- Per-sample linear index of `coords` (dim 1 the channel, then the spatial dims) in `shape`
-- laid out channels last, N(D)HWC: the channel innermost, then W, H (, D).
local function cl_strides(shape)
  local st, s = { [1] = 1 }, shape.dim[1]
  for d = shape.rank - 1, 2, -1 do
    st[d] = s
    s = s * shape.dim[d]
  end
  return st
end

function lib.lin_cl(shape, coords) return lin_with(shape, coords, cl_strides(shape)) end

-- The layer's input and output are channels last (the spec's `layout`); buffers are not, but
-- one held as the output is (planner.h, fg_io_buffer_value; plan.buffers[b].io).
function lib.io_cl(layer) return layer.layout == "channels_last" end

-- Whether a parameter is a block tensor (a batched parameter) with a value a pixel, the
-- output's shape (a residual), not one a channel ([N, C], a time embedding): any dimension
-- past its channel's is not 1
function lib.per_pixel_tensor(param)
  if not param.batched then return false end
  for pd = 1, param.rank - 1 do
    if param.dim[pd] ~= 1 then return true end
  end
  return false
end

-- Declares coordinate variables `<prefix>d` for the per-sample linear index `idx` under strides
-- `st`, in the order `order` (the outermost dim, `outer`, takes no modulo); returns their names.
local function unravel_with(code, shape, idx, prefix, st, order, outer)
  local coords = {}
  for _, d in ipairs(order) do
    if shape.dim[d] == 1 then
      coords[d] = "0"
    else
      local name = prefix .. d
      local e = st[d] == 1 and idx or string.format("(%s / %d)", idx, st[d])
      if d ~= outer then e = string.format("%s %% %d", e, shape.dim[d]) end
      code:line("const int %s = %s;", name, e)
      coords[d] = name
    end
  end
  return coords
end

-- Declares coordinate variables `<prefix>1..` for the per-sample linear index `idx` and
-- returns their names.
function lib.unravel(code, shape, idx, prefix)
  local order = {}
  for d = 1, shape.rank - 1 do order[d] = d end
  return unravel_with(code, shape, idx, prefix, lib.strides(shape), order, 1)
end

-- The same for an index of the channels-last order (N(D)HWC: the channel innermost, then W,
-- H (, D); lib.lin_cl's).
function lib.unravel_cl(code, shape, idx, prefix)
  local order = { 1 }
  for d = shape.rank - 1, 2, -1 do order[#order + 1] = d end
  return unravel_with(code, shape, idx, prefix, cl_strides(shape), order, order[#order])
end

-- Whether `pass` stores a buffer held as the output is (planner.h, fg_io_buffer_value).
function lib.stores_io_buffer(plan, pass) return pass.store_buffer >= 0 and plan.buffers[pass.store_buffer].io end

-- ---- clusters (sm_90) ------------------------------------------------------------------
-- A CTA's rank in its cluster and a barrier of every thread of the cluster (each warp
-- converged at it), for the passes that run in clusters: a resident pass, wgmma CTA pairs.
-- layer.lua emits it once a source.
lib.cluster_prelude = [[
__device__ __forceinline__ unsigned fg_cluster_rank(void)
{
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ void fg_cluster_sync(void)
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
]]

-- ---- the layer's input and output dtype ----------------------------------------------
-- The input and output are float32, or bf16/fp16 (the spec's `dtype`) held as their 16 bits
-- in `fg_io` (unsigned short; the prelude below defines it and its conversions). Everything
-- in between is float32: a half input is widened where it is loaded, the output rounded
-- where it is stored.
-- The op whose statistics accumulator acc holds: a prologue norm's (on the layer input), the
-- next layer's prologue norm's (an accumulator `exported`: over this layer's output), or op
-- acc.op's of the chain.
function lib.accum_op(layer, acc)
  if acc.prologue then return layer.pro[acc.op] end
  if acc.exported then return layer.export_norm end
  return layer.ops[acc.op]
end

function lib.io_half(layer) return layer.dtype ~= "fp32" end
function lib.io_ctype(layer) return lib.io_half(layer) and "fg_io" or "float" end

-- The value `v` (a float expression) as stored into the layer output.
function lib.io_store(layer, v)
  if lib.io_half(layer) then return "fg_io_round(" .. v .. ")" end
  return v
end

-- The prelude of a half-dtype layer (none for float32: its sources stay as they were). The
-- conversions are PTX's (cvt, sm_80+), not cuda_bf16.h/cuda_fp16.h: a generated source
-- includes no header, so NVRTC needs none (DESIGN.md, templates/layer.lua).
function lib.io_prelude(layer)
  if layer.dtype == "bf16" then
    return [[
/* dtype bf16: the input and output elements (the bits of a bfloat16) */
typedef unsigned short fg_io;
/* an element's bits widened to a float (exact: a bfloat16's bits are a float's upper half) */
__device__ __forceinline__ float fg_io_widen(unsigned short b) { return __uint_as_float((unsigned)b << 16); }
__device__ __forceinline__ float fg_io_load(const fg_io *p) { return fg_io_widen(*p); }
/* to the nearest bfloat16, ties to even (NaN stays NaN) */
__device__ __forceinline__ fg_io fg_io_round(float x)
{
    unsigned short r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(x));
    return r;
}
]]
  elseif layer.dtype == "fp16" then
    return [[
/* dtype fp16: the input and output elements (the bits of an IEEE half) */
typedef unsigned short fg_io;
/* an element's bits widened to a float (exact) */
__device__ __forceinline__ float fg_io_widen(unsigned short b)
{
    float r;
    asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(b));
    return r;
}
__device__ __forceinline__ float fg_io_load(const fg_io *p) { return fg_io_widen(*p); }
/* to the nearest half, ties to even (overflow to infinity, NaN stays NaN) */
__device__ __forceinline__ fg_io fg_io_round(float x)
{
    unsigned short r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(x));
    return r;
}
]]
  end
  return ""
end

function lib.map(t, f)
  local r = {}
  for i, v in ipairs(t) do r[i] = f(v) end
  return r
end

return lib
