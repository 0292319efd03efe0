return layer "prologue_preact_bn" {
  input = { "N", 32, 14, 14 },
  dtype = "bf16",
  batch_norm { name = "bn1", stats = "running" },
  relu {},
  mul { param = "gate" },
  conv2d { name = "conv1", out_channels = 48, kernel = 1, bias = false },
}
