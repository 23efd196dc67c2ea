"""Write ``examples/digits_cnn.onnx``: a small CNN for the 8x8 digits, exported by PyTorch in
training mode (needs torch: ``pip install torch``, then ``python examples/make_digits_cnn.py``).

Conv 1->8 3x3 (padding 1), BatchNorm, ReLU, MaxPool 2, Flatten, Linear 128->10: logits. The
TorchScript exporter keeps batch normalization's training semantics (``training_mode=1``);
the batch dim is symbolic (``N``). Weights come from ``torch.manual_seed(0)``. The exporter runs
the module once in training mode while tracing, which moves the running statistics by one
batch, so they are put back to their initial values (0 and 1) before the export.
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
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 4 * 4, 10))


def export(net: nn.Module) -> bytes:
    """The ONNX bytes of ``net`` in training mode, running statistics as they were."""
    state = {k: v.clone() for k, v in net.state_dict().items()}
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net.train(), torch.zeros(2, 1, 8, 8), buf, dynamo=False,
                          opset_version=17, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, input_names=["x"],
                          output_names=["logits"],
                          dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}})
    net.load_state_dict(state)
    data = buf.getvalue()
    # The tracing pass moved the running statistics (any export would): write the initial
    # values into the initializers instead.
    import onnx
    from onnx import numpy_helper

    m = onnx.load_from_string(data)
    for t in m.graph.initializer:
        if t.name in state:
            t.CopyFrom(numpy_helper.from_array(state[t.name].numpy(), t.name))
    return m.SerializeToString()


if __name__ == "__main__":
    out = Path(__file__).with_name("digits_cnn.onnx")
    out.write_bytes(export(model()))
    print(f"wrote {out}")
