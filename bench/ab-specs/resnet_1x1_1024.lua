-- SPDX-License-Identifier: Apache-2.0
-- A/B spec (v18: wide inputs on wgmma): a ResNet-50 stage-4 bottleneck's first 1x1 conv,
-- 1024 -> 256 on 14x14, with its (eval) BatchNorm and ReLU
return layer "ab_resnet_1x1_1024" {
  input = { "N", 1024, 14, 14 },
  conv2d { name = "conv1", out_channels = 256, kernel = 1, bias = false },
  batch_norm { name = "bn1", stats = "running" },
  relu {},
}
