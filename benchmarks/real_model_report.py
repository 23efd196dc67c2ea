"""How gradc does on the real models of the tests: one row per model and export form.

For each model of tests/real_models.py (batch 2, 32x32, narrowed by the tests' widths) and each
export form: whether ``gradc.from_onnx`` imports it, the forward's largest relative difference
from onnxruntime on the exported file, and, for the training form with the loss
(``ts_train_loss``), the parameter gradients (``gradc.grad(wrt="parameters")``) against
torch.autograd in float64 and float32 on the reference target, and per target (numpy, c, onnx
in stock onnxruntime) against the reference in float32. Run from the repository root (needs
torch; the default exporter's forms need onnxscript):

    python benchmarks/real_model_report.py
"""

from __future__ import annotations

import logging
import sys

import numpy as np

sys.path.insert(0, "tests")
import real_models as rm  # noqa: E402
import test_real_models as trm  # noqa: E402

import gradc  # noqa: E402

logging.getLogger("torch.onnx").setLevel(logging.ERROR)


def rel(got: np.ndarray, want: np.ndarray, scale: float) -> float:
    """Largest |got - want| relative to ``scale``."""
    return float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max()) / scale


def forward_row(name: str, form: str) -> str:
    """Imports? and the forward's difference from onnxruntime."""
    import onnxruntime as ort
    try:
        _, x, labels, blob = trm.exported(name, form)
        g = gradc.from_onnx(blob)
    except Exception as e:  # noqa: BLE001 - reported in the table
        return f"| {name} | {form} | no: {type(e).__name__} | |"
    inputs = trm.feeds(blob, x, labels)
    want = ort.InferenceSession(blob, providers=["CPUExecutionProvider"]).run(None, inputs)
    got = gradc.compile(g, target="reference")(**trm.gradc_feeds(g, inputs))
    worst = max(rel(got[o.name], w, float(np.abs(w).max()) or 1.0)
                for o, w in zip(g.outputs, want))
    return f"| {name} | {form} | yes ({len(g.parameters)} parameters) | {worst:.1e} |"


def gradient_row(name: str) -> str:
    """Gradients against torch (float64, float32) and each target against the reference."""
    cells = []
    for dtype in ("float64", "float32"):
        model, x, labels, _ = trm.exported(name, "ts_train_loss", dtype)
        model.train()
        model.zero_grad()
        rm.WithLoss(model)(x, labels).backward()
        want = {f"grad_model.{n}": p.grad.numpy() for n, p in model.named_parameters()}
        got, _, _ = trm._gradients(name, dtype, "reference")
        scale = max(float(np.abs(w).max()) for w in want.values())
        cells.append(max(rel(got[n], w, scale) for n, w in want.items()))
    for target in ("numpy", "c", "onnx"):
        got, ref, train = trm._gradients(name, "float32", target)
        scale = max(float(np.abs(ref[o.name]).max()) for o in train.outputs)
        cells.append(max(rel(got[o.name], ref[o.name], scale) for o in train.outputs))
    return f"| {name} | " + " | ".join(f"{c:.1e}" for c in cells) + " |"


def main() -> None:
    """Print both tables."""
    print("| model | form | imports | forward vs onnxruntime (rel.) |")
    print("|---|---|---|---:|")
    for name in trm.MODELS:
        for form in rm.FORMS:
            print(forward_row(name, form), flush=True)
    print()
    print("| model | grads vs torch f64 | grads vs torch f32 | numpy vs ref | c vs ref | "
          "onnx (stock ORT) vs ref |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in trm.MODELS:
        print(gradient_row(name), flush=True)


if __name__ == "__main__":
    main()
