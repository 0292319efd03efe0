return layer "all" {
  input = { "N", 4, 12, 16 },
  conv2d { out_channels = 8, kernel = 3, padding = 1, groups = 2, as = "c" },
  relu {}, leaky_relu { negative_slope = 0.1 }, gelu {}, gelu { approximate = "tanh" }, sigmoid {}, tanh {},
  softplus { beta = 2, threshold = 10 }, mish {}, silu {}, hardswish {}, hardsigmoid {}, hardtanh {},
  clamp { min = -0.5, max = 2 }, exp {}, log {}, abs {}, neg {},
  add { scalar = 1 }, sub { param = "p", shape = { 8, 1, 1 } }, mul { value = "c" }, div { scalar = 3 },
  min { scalar = 0.5 }, max { param = "q", shape = { 16 } },
  group_norm { groups = 4 }, instance_norm {}, batch_norm { name = "bn" },
  batch_norm { name = "bn2", stats = "running" }, layer_norm { normalized_shape = { 12, 16 } },
  max_pool { kernel = 2, padding = 1 }, avg_pool2d { kernel = 2, stride = 1, padding = 1, count_include_pad = false },
  softmax { dim = 1 }, logsumexp { dim = 3, keepdim = true }, sum { dim = 2, keepdim = true },
  min { dim = 1, keepdim = true }, global_avg_pool {}, mean { dims = { 1 } },
}
