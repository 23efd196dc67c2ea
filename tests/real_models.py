"""Real CNNs and MLPs in PyTorch, and their ONNX exports, for the real-model tests (test-only).

The architectures are torchvision's resnet18, mobilenet_v2 and squeezenet1_0, written out here
(torchvision's PyPI wheel is a CUDA build that does not import beside the CPU torch the tests
use), plus the UNet and MLP of ``../shared/research/real-models.md``. ``width`` divides every
channel count, so the tests run the real layer structure (every Conv, BatchNorm, pooling,
concatenation, residual and resampling of the full model) at a fraction of the cost; width 1
is the full model. Weights come from ``torch.manual_seed``; nothing is downloaded.

``export(model, form, ...)`` writes one of the four forms of the research notes:
``ts_train`` / ``ts_train_loss`` (TorchScript exporter, training mode: batch normalization with
``training_mode=1``), ``dynamo_eval`` / ``dynamo_train_loss`` (torch's default exporter, which
needs onnxscript; its training form computes the eval-mode loss, see the research notes).
"""

from __future__ import annotations

import io
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

FORMS = ("ts_train", "ts_train_loss", "dynamo_eval", "dynamo_train_loss")


def _c(channels: int, width: int) -> int:
    return max(1, channels // width)


def conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1,
            act: type[nn.Module] | None = nn.ReLU) -> nn.Sequential:
    """Conv (no bias) -> BatchNorm -> activation, as torchvision builds them."""
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups,
                                         bias=False), nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act(inplace=True) if act in (nn.ReLU, nn.ReLU6) else act())
    return nn.Sequential(*layers)


class BasicBlock(nn.Module):
    """resnet18's residual block."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = (conv_bn(cin, cout, 1, stride, act=None)
                           if stride != 1 or cin != cout else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNet18(nn.Module):
    """torchvision.models.resnet18."""

    def __init__(self, num_classes: int = 1000, width: int = 1) -> None:
        super().__init__()
        w = [_c(c, width) for c in (64, 128, 256, 512)]
        self.conv1 = nn.Conv2d(3, w[0], 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(w[0])
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        blocks, cin = [], w[0]
        for i, cout in enumerate(w):
            blocks += [BasicBlock(cin, cout, 1 if i == 0 else 2), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(w[3], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = F.adaptive_avg_pool2d(self.layers(x), 1)
        return self.fc(torch.flatten(x, 1))


class InvertedResidual(nn.Module):
    """mobilenet_v2's block: expand 1x1, depthwise 3x3, project 1x1, residual when shapes allow."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(conv_bn(cin, hidden, 1, act=nn.ReLU6))
        layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
                   conv_bn(hidden, cout, 1, act=None)]
        self.conv = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.residual else self.conv(x)


class MobileNetV2(nn.Module):
    """torchvision.models.mobilenet_v2."""

    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, num_classes: int = 1000, width: int = 1) -> None:
        super().__init__()
        cin = _c(32, width)
        layers: list[nn.Module] = [conv_bn(3, cin, 3, 2, act=nn.ReLU6)]
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                layers.append(InvertedResidual(cin, _c(c, width), s if i == 0 else 1, t))
                cin = _c(c, width)
        last = _c(1280, width)
        layers.append(conv_bn(cin, last, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


class Fire(nn.Module):
    """squeezenet's module: squeeze 1x1, then 1x1 and 3x3 expansions concatenated."""

    def __init__(self, cin: int, squeeze: int, e1: int, e3: int) -> None:
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.expand1x1 = nn.Conv2d(squeeze, e1, 1)
        self.expand3x3 = nn.Conv2d(squeeze, e3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.squeeze(x))
        return torch.cat([F.relu(self.expand1x1(x)), F.relu(self.expand3x3(x))], 1)


class SqueezeNet10(nn.Module):
    """torchvision.models.squeezenet1_0."""

    def __init__(self, num_classes: int = 1000, width: int = 1) -> None:
        super().__init__()
        c = lambda n: _c(n, width)  # noqa: E731
        fires = [(96, 16, 64), (128, 16, 64), (128, 32, 128), None, (256, 32, 128),
                 (256, 48, 192), (384, 48, 192), (384, 64, 256), None, (512, 64, 256)]
        layers: list[nn.Module] = [nn.Conv2d(3, c(96), 7, 2), nn.ReLU(inplace=True),
                                   nn.MaxPool2d(3, 2, ceil_mode=True)]
        for f in fires:
            layers.append(nn.MaxPool2d(3, 2, ceil_mode=True) if f is None
                          else Fire(c(f[0]), c(f[1]), c(f[2]), c(f[2])))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(c(512), num_classes, 1),
                                        nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.classifier(self.features(x)), 1)


class UNet(nn.Module):
    """Two levels, conv-BN-ReLU blocks, max pooling down, nearest x2 up from the bottleneck,
    bilinear x2 (align_corners=False) above, concatenated skips, ``classes`` per pixel."""

    def __init__(self, classes: int = 4, width: int = 16) -> None:
        super().__init__()
        w = width

        def block(cin: int, cout: int) -> nn.Sequential:
            return nn.Sequential(conv_bn(cin, cout, 3), conv_bn(cout, cout, 3))

        self.enc1, self.enc2 = block(3, w), block(w, 2 * w)
        self.mid = conv_bn(2 * w, 2 * w, 3)
        self.dec2, self.dec1 = block(4 * w, w), block(2 * w, w)
        self.head = nn.Conv2d(w, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        m = self.mid(F.max_pool2d(e2, 2))
        d2 = self.dec2(torch.cat([F.interpolate(m, scale_factor=2, mode="nearest"), e2], 1))
        up = F.interpolate(d2, scale_factor=2, mode="bilinear", align_corners=False)
        return self.head(self.dec1(torch.cat([up, e1], 1)))


class MLP(nn.Module):
    """Flatten, Linear 3072-128-64-10 with ReLU, LogSoftmax (its loss is nll_loss)."""

    def __init__(self, sizes: tuple[int, ...] = (3072, 128, 64, 10)) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.flatten(x, 1)
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = F.relu(x)
        return F.log_softmax(x, 1)


class WithLoss(nn.Module):
    """The model followed by its loss: nll_loss after a LogSoftmax output, else cross_entropy."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        y = self.model(x)
        if isinstance(self.model, MLP):
            return F.nll_loss(y, target)
        return F.cross_entropy(y, target)


def make(name: str, width: int = 1, seed: int = 0, size: int = 64
         ) -> tuple[nn.Module, tuple[int, ...]]:
    """A model with weights from ``seed`` (10 classes; the UNet 4 per pixel), and the shape of
    one example: ``3 x size x size`` (the MLP takes 3 x 32 x 32)."""
    torch.manual_seed(seed)
    models = {"resnet18": lambda: ResNet18(10, width),
              "mobilenet_v2": lambda: MobileNetV2(10, width),
              "squeezenet1_0": lambda: SqueezeNet10(10, width),
              "unet": lambda: UNet(4, max(1, 16 // width)), "mlp": MLP}
    model = models[name]()
    return model, ((3, 32, 32) if name == "mlp" else (3, size, size))


def no_dropout(model: nn.Module) -> nn.Module:
    """The model with every Dropout's probability set to 0, for comparisons that need the same
    numbers as PyTorch (gradc draws its own random numbers, SPEC-training §20)."""
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    return model


def labels_for(name: str, model: nn.Module, x: torch.Tensor, seed: int = 1) -> torch.Tensor:
    """Class labels shaped like the model's output without axis 1."""
    with torch.no_grad():
        y = model.eval()(x)
    model.train()
    g = torch.Generator().manual_seed(seed)
    shape = (y.shape[0],) + tuple(y.shape[2:])
    return torch.randint(0, y.shape[1], shape, generator=g)


def export(model: nn.Module, form: str, x: torch.Tensor, target: torch.Tensor) -> bytes:
    """The ONNX bytes of one export form (see the module docstring)."""
    buf = io.BytesIO()
    loss = form.endswith("_loss")
    module: nn.Module = WithLoss(model) if loss else model
    args: tuple[Any, ...] = (x, target) if loss else (x,)
    names = ["x", "target"] if loss else ["x"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if form.startswith("ts_"):
            module.train()
            torch.onnx.export(module, args, buf, dynamo=False, opset_version=17,
                              training=torch.onnx.TrainingMode.TRAINING,
                              do_constant_folding=False, input_names=names,
                              output_names=["loss" if loss else "y"])
        else:
            module.train() if loss else module.eval()
            prog = torch.onnx.export(module, args, dynamo=True, input_names=names,
                                     output_names=["loss" if loss else "y"], verbose=False)
            prog.save(buf)
    module.train()
    return buf.getvalue()
