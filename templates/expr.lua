-- SPDX-License-Identifier: Apache-2.0
-- The inline evaluator: prints the code that computes value k of the chain at given
-- coordinates, recursively from whatever the pass can read (the conv accumulator, a
-- workspace buffer, finalized statistics). Windows (pooling, small reductions) become
-- loops whose bodies evaluate the previous value at the window's coordinates.
--
-- Values already computed at the same coordinates are reused (a memo per C scope), so a
-- residual `add { value = "c" }` reads the conv output once.
local lib = import("lib")
local ops = import("ops")
local flit = lib.flit

local M = {}
local Eval = {}
Eval.__index = Eval

-- names: the C names of the kernel's pointer arguments, as names[kind][index].
function M.new(layer, plan, pass, code, names)
  local e = setmetatable({
    layer = layer, plan = plan, pass = pass, code = code, names = names,
    scopes = { {} }, loaders = {}, counter = 0,
  }, Eval)
  return e
end

function Eval:fresh(prefix)
  self.counter = self.counter + 1
  return prefix .. self.counter
end

local function key_of(k, coords)
  return k .. "@" .. table.concat(coords, ",", 1, #coords)
end

function Eval:lookup(key)
  for i = #self.scopes, 1, -1 do
    local v = self.scopes[i][key]
    if v then return v end
  end
end

function Eval:remember(k, coords, var)
  self.scopes[#self.scopes][key_of(k, coords)] = var
end

function Eval:push_scope() self.scopes[#self.scopes + 1] = {} end
function Eval:pop_scope() self.scopes[#self.scopes] = nil end

-- Value v lives in workspace buffer b: loads index it directly.
function Eval:load_from_buffer(v, b)
  self.loaders[v] = function(coords)
    local shape = self.layer.ops[v].out_shape
    local var = self:fresh("v" .. v .. "_")
    if self.plan.buffers[b].io then -- held as the output is (planner.h, fg_io_buffer_value)
      self.code:line("const float %s = fg_io_widen(%s[(fg_u64)n * %d + %s]);", var, self.names.buffer[b], shape.sample,
        lib.lin_cl(shape, coords))
    else
      self.code:line("const float %s = %s[(fg_u64)n * %d + %s];", var, self.names.buffer[b], shape.sample,
        lib.lin(shape, coords))
    end
    return var
  end
end

function Eval:eval(k, coords)
  local memo = self:lookup(key_of(k, coords))
  if memo then return memo end
  local v
  if self.loaders[k] then
    v = self.loaders[k](coords)
  else
    v = self:compute(k, coords)
  end
  self:remember(k, coords, v)
  return v
end

-- Hoisting: a conv epilogue visits many outputs of one channel in a row. hoist = { code
-- position `at` and `depth` in self.code, `channel` (the coordinate text of that channel),
-- `guard` (when the channel exists); or `channels` (a set of such texts) and `guards` (each
-- one's guard, else `guard`) } makes loads that depend on the channel alone (a
-- per-channel parameter, a norm's statistic over whole channels) happen once there instead
-- of at every output.
function Eval:set_hoist(h)
  if h then h.cache = {} end
  self.hoist = h
end

function Eval:hoisted(ctype, text, coords)
  local h = self.hoist
  -- h.channel: the channel variable of the hoisted loads; h.channels: a set of them
  if not h or (coords[1] ~= h.channel and not (h.channels and h.channels[coords[1]])) then return nil end
  local v = h.cache[text]
  if v then return v end
  v = self:fresh("hc")
  local zero = ctype == "float" and "0.0f" or ctype .. "{}"
  -- h.guards: each channel variable's own guard (conv.lua, a lane's channel vectors)
  local guard = h.guards and h.guards[coords[1]] or h.guard
  table.insert(self.code.lines, h.at, string.rep("    ", h.depth) ..
    string.format("const %s %s = (%s) ? %s : %s;", ctype, v, guard, text, zero))
  h.at = h.at + 1
  h.cache[text] = v
  return v
end

-- Prefetching: a staged conv epilogue (conv.lua, th.stage) stores its innermost loop's rows
-- one after another. A block tensor read at each output's index (a residual) loaded inside
-- that loop waits out each load before its row's store and the next row's load: ptxas keeps
-- them in order. prefetch = { var (the row's index in its chunk of rows) } collects those
-- loads instead (pre<k>[var] here); the epilogue loads the chunk's rows' before its row loop
-- (conv.lua, prefetch).
function Eval:set_prefetch(p)
  if p then p.loads, p.index = {}, {} end
  self.prefetch = p
end

function Eval:prefetched(text)
  local p = self.prefetch
  local k = p.index[text]
  if not k then
    k = #p.loads
    p.loads[k + 1] = text
    p.index[text] = k
  end
  return string.format("pre%d[%s]", k, p.var)
end

-- A block tensor whose tile a staged wgmma epilogue holds in shared memory (conv_wgmma.lua: the
-- residual, copied by cp.async during the main loop): { param (its index), value (the current
-- output's element of it there, a float expression) }; param_at reads it there, and nothing
-- prefetches it (conv.lua).
function Eval:set_smem_tensor(t) self.smem_tensor = t end

function Eval:in_smem(p) return self.smem_tensor ~= nil and self.smem_tensor.param == p end

-- A parameter broadcast against `shape` (right-aligned, PyTorch rules).
function Eval:param_at(p, shape, coords)
  local param = self.layer.params[p]
  local terms, stride = {}, 1
  local channel_only = true
  for pd = param.rank - 1, 0, -1 do
    local d = shape.rank - param.rank + pd
    if param.dim[pd] ~= 1 and d >= 1 then
      channel_only = channel_only and d == 1
      terms[#terms + 1] = stride == 1 and coords[d] or string.format("(%s) * %d", coords[d], stride)
    end
    stride = stride * param.dim[pd]
  end
  local idx = #terms == 0 and "0" or table.concat(terms, " + ")
  -- a block tensor (a batched parameter: docs/spec.md, "Blocks") holds one value per sample:
  -- `n`, the sample in scope wherever values are evaluated, picks it; never hoisted. It is a
  -- tensor of the block, so it has the layer's dtype and layout (the block's), not a
  -- parameter's float32 NC(D)HW: channels last, its channel is innermost ([N, C] is the
  -- same memory either way); bf16/fp16, it is widened where it is loaded
  if param.batched then
    if self:in_smem(p) then return self.smem_tensor.value end
    if lib.io_cl(self.layer) then
      local pshape = { rank = param.rank + 1, dim = { [0] = 1 } }
      for pd = 0, param.rank - 1 do pshape.dim[pd + 1] = param.dim[pd] end
      idx = lib.lin_cl(pshape, coords)
    end
    local at = string.format("%s[(fg_u64)n * %d + %s]", self.names.param[p], param.count, idx)
    if lib.io_half(self.layer) then at = "fg_io_load(&" .. at .. ")" end
    -- one value a pixel (not a per-sample vector such as a time embedding): prefetched
    if self.prefetch and lib.per_pixel_tensor(param) then return self:prefetched(at) end
    return at
  end
  local text = string.format("%s[%s]", self.names.param[p], idx)
  if channel_only then return self:hoisted("float", text, coords) or text end
  return text
end

-- The index of a statistic kept per sample: key `within` of sample `sample`'s `per_sample` keys
-- (the accumulators' layout; a batch-wide statistic's key is `within` alone).
function M.sample_key(sample, per_sample, within)
  return string.format("(long long)%s * %d + %s", sample, per_sample, within)
end

-- Key of a norm's statistic for an element at `coords` of its input (`within_sample`: its
-- index among its sample's keys, as a block's finalized copy of them is indexed).
function Eval:norm_key(op, coords, within_sample)
  local st, shape = op.stat, op.in_shape
  local key = st.channel_group == 1 and coords[1] or string.format("(%s) / %d", coords[1], st.channel_group)
  if st.channel_group == shape.dim[1] then key = "0" end
  for d = 2, shape.rank - 1 do
    if (st.mask >> d) & 1 == 0 then
      key = string.format("(%s) * %d + %s", key, shape.dim[d], coords[d])
    end
  end
  if not st.over_batch and not within_sample then key = M.sample_key("n", st.keys_per_sample, key) end
  return key
end

-- Key of a reduction's (or softmax's) statistic for an element of its input: the index in
-- the keepdim shape.
function Eval:reduce_key(op, coords)
  local shape = op.in_shape
  local kept = { rank = shape.rank, dim = { [0] = 1 } }
  local kc = {}
  for d = 1, shape.rank - 1 do
    local reduced = (op.reduce_mask >> d) & 1 == 1
    kept.dim[d] = reduced and 1 or shape.dim[d]
    kc[d] = reduced and "0" or coords[d]
  end
  local per_sample = shape.sample
  for d = 1, shape.rank - 1 do
    if (op.reduce_mask >> d) & 1 == 1 then per_sample = per_sample // shape.dim[d] end
  end
  return M.sample_key("n", per_sample, lib.lin(kept, kc))
end

-- Key of accumulator a for an element of the value it reduces.
function Eval:accum_key(a, coords)
  local acc = self.plan.accums[a]
  -- the channel-sums rule's sums: one per (sample, channel) of the value they add up
  if acc.per_channel then return M.sample_key("n", acc.keys_per_sample, coords[1]) end
  local op = lib.accum_op(self.layer, acc)
  if op.class == "norm" then return self:norm_key(op, coords) end
  return self:reduce_key(op, coords)
end

function Eval:declare(prefix, expr)
  local v = self:fresh(prefix)
  self.code:line("const float %s = %s;", v, expr)
  return v
end

-- Coordinates of the input of a window op (reduction or pool) for output `coords`, with
-- loop variables for the window; returns the input coordinates and the loops.
local function window_coords(self, op, coords)
  local shape, incoords, loops = op.in_shape, {}, {}
  if op.class == "pool" then
    incoords[1] = coords[1]
    for i = 0, op.spatial - 1 do
      local d = 2 + i
      local r = self:fresh("w")
      loops[#loops + 1] = { var = r, extent = op.kernel[i] }
      local base = op.stride[i] == 1 and coords[d] or string.format("(%s) * %d", coords[d], op.stride[i])
      if op.padding[i] > 0 then base = string.format("%s - %d", base, op.padding[i]) end
      incoords[d] = string.format("(%s + %s)", base, r)
    end
    return incoords, loops
  end
  local od = 1
  for d = 1, shape.rank - 1 do
    if (op.reduce_mask >> d) & 1 == 1 then
      local r = self:fresh("r")
      incoords[d] = r
      loops[#loops + 1] = { var = r, extent = shape.dim[d] }
      if op.keepdim then od = od + 1 end
    else
      incoords[d] = coords[od]
      od = od + 1
    end
  end
  return incoords, loops
end

-- A window (pool, small reduction) as a loop over its elements: the registry's inline init,
-- step and final (gen/op_registry.c) around the evaluation of the previous value.
function Eval:compute_window(k, op, coords)
  local c = self.code
  local incoords, loops = window_coords(self, op, coords)
  local acc = self:fresh("acc")
  local count = 1
  for _, l in ipairs(loops) do count = count * l.extent end
  local r = op.reduce
  lib.emit(c, lib.fill(r.init, op, { acc = acc }))
  -- an average that leaves the padding out divides by the elements it saw
  local valid
  if op.class == "pool" and op.f.count_include_pad == false then
    valid = acc .. "_n"
    c:line("int %s = 0;", valid)
  end
  for _, l in ipairs(loops) do
    c:open("for (int %s = 0; %s < %d; ++%s) {", l.var, l.var, l.extent, l.var)
  end
  self:push_scope()
  local guard = {}
  if op.class == "pool" then
    for i = 0, op.spatial - 1 do
      if op.padding[i] > 0 then
        local d = 2 + i
        local iv = self:fresh("i")
        c:line("const int %s = %s;", iv, incoords[d])
        incoords[d] = iv
        guard[#guard + 1] = string.format("%s >= 0 && %s < %d", iv, iv, op.in_shape.dim[d])
      end
    end
    if #guard > 0 then c:open("if (%s) {", table.concat(guard, " && ")) end
  end
  local x = self:eval(k - 1, incoords)
  lib.emit(c, lib.fill(r.step, op, { acc = acc, x = x }))
  if valid then c:line("++%s;", valid) end
  if #guard > 0 then c:close() end
  self:pop_scope()
  for _ = 1, #loops do c:close() end
  if r.final == "{acc}" then return acc end
  local n = valid and ("(float)" .. valid) or flit(count)
  return self:declare("v" .. k .. "_", lib.fill(r.final, op, { acc = acc, count = n }))
end

-- A reduction whose partial results earlier passes accumulated (and did not finalize): the
-- registry's `read` of its accumulators {a0}, {a1} at the element's key.
function Eval:compute_from_accum(k, op, coords)
  local list = self.plan.op[k].accums
  local acc = self.plan.accums[list[#list]]
  local key = M.sample_key("n", acc.keys_per_sample, lib.lin(op.out_shape, coords))
  local read = op.reduce.read
  local _, uses = read:gsub("{key}", "")
  if uses > 1 then
    local kv = self:fresh("key")
    self.code:line("const long long %s = %s;", kv, key)
    key = kv
  end
  local vars = { key = key, count = lib.dlit(acc.count_per_sample) }
  for i, a in ipairs(list) do vars["a" .. (i - 1)] = self.names.accum[a] end
  return self:declare("v" .. k .. "_", lib.fill(read, op, vars))
end

-- A norm's output at `coords` of its input (x its value there): from its statistic `src`
-- (an fg_stat expression; nil: the running statistics, parameters), then the affine
-- parameters. `in_memory`: src reads device memory, so a statistic over whole channels is
-- loaded once per channel (hoisted). Also the prologue's norms (prologue.lua).
function Eval:normalize(op, x, coords, src, in_memory)
  local e
  if not src then -- running statistics: parameters
    e = string.format("(%s - %s[%s]) / sqrtf(%s[%s] + %s)", x, self.names.param[op.mean_param], coords[1],
      self.names.param[op.var_param], coords[1], flit(op.eps))
  else
    local st
    if in_memory then
      -- statistics over whole channels depend on the channel alone
      local whole = true
      for d = 2, op.in_shape.rank - 1 do whole = whole and (op.stat.mask >> d) & 1 == 1 end
      if whole then st = self:hoisted("fg_stat", src, coords) end
    end
    if not st then
      st = self:fresh("st")
      self.code:line("const fg_stat %s = %s;", st, src)
    end
    e = string.format("(%s - %s.a) * %s.b", x, st, st)
  end
  if op.affine then
    local w, b
    if op.norm_channels == "trailing" then
      w = self:param_at(op.weight_param, op.in_shape, coords)
      b = self:param_at(op.bias_param, op.in_shape, coords)
    else
      w = string.format("%s[%s]", self.names.param[op.weight_param], coords[1])
      b = string.format("%s[%s]", self.names.param[op.bias_param], coords[1])
      w = self:hoisted("float", w, coords) or w
      b = self:hoisted("float", b, coords) or b
    end
    e = string.format("fmaf(%s, %s, %s)", e, w, b)
  end
  return e
end

function Eval:compute(k, coords)
  local op = self.layer.ops[k]
  local cls = op.class
  -- a batch_norm folded into the conv's weights and bias (gen/fold.h): the conv's value already
  -- is its output
  if op.folded then return self:eval(k - 1, coords) end
  if cls == "conv" then
    error(string.format("value %d (the convolution) is not available in pass %d at %s", k, self.pass.index,
      table.concat(coords, ",")))
  end
  if cls == "unary" then
    return self:declare("v" .. k .. "_", ops.unary(op, self:eval(k - 1, coords), self.plan.fast_gelu))
  end
  -- a shape op: the same element (its shapes here are the layout before it: gen/render.c)
  if cls == "shape" then return self:eval(k - 1, coords) end
  if cls == "binary" then
    local a = self:eval(k - 1, coords)
    local b
    if op.operand == "scalar" then
      b = flit(op.scalar)
    elseif op.operand == "param" then
      b = self:param_at(op.operand_param, op.in_shape, coords)
    else
      b = self:eval(op.operand_value, coords)
    end
    return self:declare("v" .. k .. "_", ops.binary(op, a, b))
  end
  if cls == "norm" then
    local x = self:eval(k - 1, coords)
    local src
    -- where the statistics live: finalized in device memory, or (resident passes) an
    -- expression the pass provides
    if op.has_stats and self.norm_stats then
      src = self.norm_stats(k, op, coords)
    elseif op.has_stats then
      src = string.format("%s[%s]", self.names.stats[self.plan.op[k].accum], self:norm_key(op, coords))
    end
    return self:declare("v" .. k .. "_", self:normalize(op, x, coords, src, not self.norm_stats))
  end
  if cls == "softmax" then
    local x = self:eval(k - 1, coords)
    local st = self:fresh("st")
    local a = self.plan.op[k].accum
    self.code:line("const fg_stat %s = %s[%s];", st, self.names.stats[a], self:reduce_key(op, coords))
    return self:declare("v" .. k .. "_", string.format("expf(%s - %s.a) * %s.b", x, st, st))
  end
  if self.plan.op[k].inline_loop then
    return self:compute_window(k, op, coords)
  end
  return self:compute_from_accum(k, op, coords)
end

return M
