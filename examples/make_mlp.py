"""Write ``examples/mlp_digits.onnx``: a multilayer perceptron for the 8x8 digits, exported by
PyTorch in training mode (needs torch: ``pip install torch``, then ``python
examples/make_mlp.py``).

Flatten, Linear 64->32, ReLU, Linear 32->10: logits. Input ``x``: float32 ``(N, 1, 8, 8)``, the
shape of ``digits.npz``'s ``x``, with a symbolic batch ``N``; output ``logits`` ``(N, 10)``.
TorchScript exporter, opset 17, no constant folding (so the weights stay initializers, which
gradc turns into parameters). Weights come from ``torch.manual_seed(0)``, so the file is the
same on every run. Train it with::

    gradc train examples/mlp_digits.onnx --data examples/digits.npz -o trained.onnx --epochs 3
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import torch
from torch import nn


def model() -> nn.Module:
    """The network, with PyTorch's default initialization from seed 0."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


def export(net: nn.Module) -> bytes:
    """The ONNX bytes of ``net`` in training mode with a symbolic batch."""
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(net.train(), torch.zeros(2, 1, 8, 8), buf, dynamo=False,
                          opset_version=17, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, input_names=["x"],
                          output_names=["logits"],
                          dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}})
    return buf.getvalue()


if __name__ == "__main__":
    out = Path(__file__).with_name("mlp_digits.onnx")
    out.write_bytes(export(model()))
    print(f"wrote {out} ({out.stat().st_size} bytes)")
