-- ResNet-50 stage 1 bottleneck (torchvision Bottleneck, 256 -> 64 -> 64 -> 256 at 56x56),
-- BatchNorm in eval mode (running statistics, folded into the convs). Parameter names are
-- the module's state_dict keys: conv1.weight, bn1.running_mean, ...
return block "resnet50_bottleneck" {
  input = { "N", 256, 56, 56 },
  layer "a" {
    conv2d { name = "conv1", out_channels = 64, kernel = 1, bias = false },
    batch_norm { name = "bn1", stats = "running" }, relu {},
  },
  layer "b" {
    conv2d { name = "conv2", out_channels = 64, kernel = 3, padding = 1, bias = false },
    batch_norm { name = "bn2", stats = "running" }, relu {},
  },
  layer "c" {
    conv2d { name = "conv3", out_channels = 256, kernel = 1, bias = false },
    batch_norm { name = "bn3", stats = "running" },
    add { tensor = "input" },   -- the identity shortcut
    relu {},
  },
}
