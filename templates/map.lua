-- A map pass: each thread evaluates the pass's chain at a few elements of its domain,
-- starting from a workspace buffer (or from accumulated statistics), writes the result
-- and feeds the statistics the next pass needs.
local lib = import("lib")
local expr = import("expr")
local feed = import("feed")

local M = {}

function M.render(layer, plan, pass, names, signature)
  local c = lib.code()
  local dshape = layer.ops[pass.domain].out_shape
  local block = pass.launch.block
  local per_thread = pass.launch.elems
  c:line("/* pass %d: v%d..v%d at each of the %d elements of v%d per sample */", pass.index, pass.first, pass.last,
    dshape.sample, pass.domain)
  c:line("extern \"C\" __global__ void __launch_bounds__(%d) %s(%s)", block, pass.kernel, signature)
  c:open("{")
  c:line("const int n = batch_base + (int)blockIdx.z;")
  local ev = expr.new(layer, plan, pass, c, names)
  if pass.source_buffer >= 0 then
    ev:load_from_buffer(plan.buffers[pass.source_buffer].value, pass.source_buffer)
  end
  -- values an earlier pass stored for this one to read back (named operands)
  for a = 0, pass.args.n - 1 do
    local arg = pass.args[a]
    if arg.kind == "buffer" and arg.index ~= pass.store_buffer then
      local is_store = false
      for i = 0, pass.extra_stores.n - 1 do is_store = is_store or pass.extra_stores[i] == arg.index end
      if not is_store then ev:load_from_buffer(plan.buffers[arg.index].value, arg.index) end
    end
  end
  feed.declare(c, plan, pass.feeds, 0)
  c:open("for (int e = 0; e < %d; ++e) {", per_thread)
  c:line("const long long li = ((long long)blockIdx.x * %d + e) * %d + (int)threadIdx.x;", per_thread, block)
  c:open("if (li < %d) {", dshape.sample)
  c:line("const int i = (int)li;")
  ev:push_scope()
  local coords = lib.unravel(c, dshape, "i", "o")
  local v = ev:eval(pass.last, coords)
  if pass.store_output then c:line("%s[(fg_u64)n * %d + i] = %s;", names.output, dshape.sample, v) end
  if pass.store_buffer >= 0 then
    c:line("%s[(fg_u64)n * %d + i] = %s;", names.buffer[pass.store_buffer], dshape.sample, v)
  end
  for i = 0, pass.extra_stores.n - 1 do
    local b = pass.extra_stores[i]
    c:line("%s[(fg_u64)n * %d + i] = %s;", names.buffer[b], dshape.sample, ev:eval(plan.buffers[b].value, coords))
  end
  feed.element(c, ev, plan, pass.feeds, v, coords, nil)
  ev:pop_scope()
  c:close()
  c:close()
  feed.finish(c, ev, plan, pass.feeds, 0)
  c:close()
  return c
end

return M
