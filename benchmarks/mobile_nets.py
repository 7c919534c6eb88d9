"""Mobile CNNs for the benchmarks, written here (no torchvision, no downloaded weights).

- ``singa_mobilenet()`` / ``torch_mobilenet()``: the same MobileNetV2-style network for
  ``training.py``: inverted residual blocks (1x1 expand, 3x3 depthwise, 1x1 project, each with
  batch norm; ReLU after the first two; a residual add where shapes allow) for 3x32x32 inputs.
- ``torch_mobilenet_v2_224()`` and ``torch_shufflenet_v2_224()``: the ImageNet-sized
  MobileNetV2 (width 1.0) and ShuffleNetV2 (1.0x) architectures for ``onnx_inference.py``,
  with random weights, in inference mode, exported to ONNX at run time by ``export_onnx``.
"""

from __future__ import annotations

from typing import Any

from singa_lite import layer, tensor

# (expansion, output channels, blocks, first stride): MobileNetV2's table, cut to CIFAR size.
CIFAR_BLOCKS = ((1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 2, 2))
IMAGENET_BLOCKS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


# -- singa_lite -----------------------------------------------------------------------------------
class InvertedResidual(layer.Layer):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.expand = layer.Conv2d(hidden, 1, bias=False) if expand != 1 else None
        self.bn0 = layer.BatchNorm2d() if expand != 1 else None
        self.dw = layer.Conv2d(hidden, 3, stride=stride, padding=1, group=hidden, bias=False)
        self.bn1 = layer.BatchNorm2d()
        self.project = layer.Conv2d(cout, 1, bias=False)
        self.bn2 = layer.BatchNorm2d()
        self.relu = layer.ReLU()
        self.residual = layer.Add() if stride == 1 and cin == cout else None

    def forward(self, x: tensor.Tensor) -> tensor.Tensor:
        y = x
        if self.expand is not None and self.bn0 is not None:
            y = self.relu(self.bn0(self.expand(y)))
        y = self.relu(self.bn1(self.dw(y)))
        y = self.bn2(self.project(y))
        return self.residual(y, x) if self.residual is not None else y


class SingaMobileNet(layer.Layer):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = layer.Conv2d(32, 3, padding=1, bias=False)
        self.stem_bn = layer.BatchNorm2d()
        self.relu = layer.ReLU()
        blocks, cin = [], 32
        for t, c, n, s in CIFAR_BLOCKS:
            for i in range(n):
                blocks.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        self.blocks = blocks
        self.register_layers(*blocks)
        self.head = layer.Conv2d(256, 1, bias=False)
        self.head_bn = layer.BatchNorm2d()
        self.pool = layer.GlobalAvgPool2d()
        self.flat = layer.Flatten()
        self.fc = layer.Linear(classes)

    def forward(self, x: tensor.Tensor) -> tensor.Tensor:
        x = self.relu(self.stem_bn(self.stem(x)))
        for block in self.blocks:
            x = block(x)
        x = self.relu(self.head_bn(self.head(x)))
        return self.fc(self.flat(self.pool(x)))


def singa_mobilenet() -> layer.Layer:
    return SingaMobileNet()


# -- PyTorch --------------------------------------------------------------------------------------
def _torch_mobilenet(blocks: tuple, stem_stride: int, head: int, classes: int) -> Any:
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
            super().__init__()
            hidden = cin * expand
            mods: list[nn.Module] = []
            if expand != 1:
                mods += [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU()]
            mods += [
                nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
                nn.BatchNorm2d(hidden),
                nn.ReLU(),
                nn.Conv2d(hidden, cout, 1, bias=False),
                nn.BatchNorm2d(cout),
            ]
            self.body = nn.Sequential(*mods)
            self.residual = stride == 1 and cin == cout

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.body(x)
            return y + x if self.residual else y

    mods: list[nn.Module] = [nn.Conv2d(3, 32, 3, stem_stride, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU()]
    cin = 32
    for t, c, n, s in blocks:
        for i in range(n):
            mods.append(Block(cin, c, s if i == 0 else 1, t))
            cin = c
    mods += [nn.Conv2d(cin, head, 1, bias=False), nn.BatchNorm2d(head), nn.ReLU()]
    mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(head, classes)]
    return nn.Sequential(*mods)


def torch_mobilenet() -> Any:
    """The PyTorch twin of ``singa_mobilenet`` (3x32x32 inputs, 10 classes)."""
    return _torch_mobilenet(CIFAR_BLOCKS, 1, 256, 10)


def torch_mobilenet_v2_224() -> Any:
    """MobileNetV2 1.0 for 3x224x224 ImageNet inputs (ReLU where the paper has ReLU6)."""
    return _torch_mobilenet(IMAGENET_BLOCKS, 2, 1280, 1000)


def torch_shufflenet_v2_224() -> Any:
    """ShuffleNetV2 1.0x for 3x224x224 inputs: channel split, branch, concat, channel shuffle."""
    import torch
    from torch import nn

    def shuffle(x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        return x.reshape(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)

    def conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, relu: bool = True) -> Any:
        mods: list[nn.Module] = [
            nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
        ]
        return nn.Sequential(*mods, nn.ReLU()) if relu else nn.Sequential(*mods)

    class Unit(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.stride = stride
            half = cout // 2
            if stride == 2:
                self.left = nn.Sequential(conv_bn(cin, cin, 3, 2, cin, relu=False), conv_bn(cin, half, 1))
            right_in = cin if stride == 2 else half
            self.right = nn.Sequential(
                conv_bn(right_in, half, 1),
                conv_bn(half, half, 3, stride, half, relu=False),
                conv_bn(half, half, 1),
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.stride == 1:
                a, b = x.chunk(2, dim=1)
                out = torch.cat([a, self.right(b)], 1)
            else:
                out = torch.cat([self.left(x), self.right(x)], 1)
            return shuffle(out)

    mods: list[nn.Module] = [conv_bn(3, 24, 3, 2), nn.MaxPool2d(3, 2, 1)]
    cin = 24
    for cout, repeats in ((116, 4), (232, 8), (464, 4)):
        for i in range(repeats):
            mods.append(Unit(cin, cout, 2 if i == 0 else 1))
            cin = cout
    mods += [conv_bn(cin, 1024, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1024, 1000)]
    return nn.Sequential(*mods)


def export_onnx(net: Any, path: str, opset: int = 17) -> None:
    """``net`` (random weights, inference mode) as an ONNX file for a 1x3x224x224 input."""
    import torch

    torch.manual_seed(0)
    net.eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        torch.onnx.export(net, (x,), path, input_names=["input"], opset_version=opset, dynamo=False)
