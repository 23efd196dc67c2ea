"""The transformer zoo's table: every model in every export form against PyTorch and onnxruntime.

Usage: ``python tests/transformer_report.py [--models gpt,bert] [--forms ts,dynamo,dynamo23]``
(a few minutes on 2 cores). One row per model and export form (``ts``: TorchScript, training
mode; ``dynamo``: the default exporter without its optimizer; ``dynamo23``: the same at opset 23,
where SDPA exports as ONNX Attention):

- imports: ``yes``, or what was refused (the first line of gradc's grouped error, or the
  exporter's own failure);
- fwd/ort: the largest difference of the float32 logits from onnxruntime's on the exported
  file, relative to their largest magnitude;
- grad f32 / grad f64: the largest relative difference of a parameter gradient from PyTorch
  autograd (``transformer_check.grad_diffs``), float32, and float64 from a float64 export;
- trajectory: 8 steps of AdamW + warmup-cosine + clipping, the largest relative difference of
  a step's loss from PyTorch's loop, and the first and last loss;
- ort step: the training step written by ``gradc.to_onnx`` (full checker, default domain) run
  3 steps in stock onnxruntime: the largest relative difference of its losses from the
  reference Trainer's.

The tests (tests/test_transformer_models.py) hold a subset of these rows to bounds; this script
prints them all for the record (docs/transformers.md keeps a copy).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import transformer_check as tc  # noqa: E402
import transformer_models as tm  # noqa: E402

import gradc  # noqa: E402

STEPS, ORT_STEPS = 8, 3
FORMS = ("ts", "dynamo", "dynamo23")


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """File descriptor 1 to /dev/null: the TorchScript exporter logs a whole graph from C++
    when it fails."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
        try:
            yield
        finally:
            os.dup2(saved, 1)
            os.close(saved)


def _make(name: str, form: str, dtype: Any) -> tc.Case:
    base, opset = ("dynamo", 23) if form == "dynamo23" else (form, None)
    with warnings.catch_warnings(), _quiet_stdout():
        warnings.simplefilter("ignore")
        return tc.make_case(name, base, dtype, False, opset)


def _first_line(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    text = text.split(" (the full message")[0]
    return text if len(text) < 160 else text[:157] + "..."


def _grads(c: tc.Case) -> float:
    mapping, _ = tc.param_names(c)
    _, want = tc.torch_step(c)
    _, got = tc.gradc_step(c, "reference", list(mapping))
    return max(tc.grad_diffs(got, want, mapping).values())


def _data(name: str, steps: int) -> list:
    fixed = [(tm.inputs(name, seed=100 + k), tm.labels(name, seed=200 + k)) for k in range(4)]
    return [fixed[s % 4] for s in range(steps)]


def _optimizer(steps: int) -> Any:
    return gradc.optim.AdamW(lr=3e-3, weight_decay=0.01,
                             schedule=gradc.optim.WarmupCosine(min(5, steps // 2), steps))


def _trainer(c: tc.Case, steps: int, params: list[str]) -> Any:
    assert c.graph is not None
    return gradc.Trainer(c.graph, _optimizer(steps), loss="cross_entropy", class_axis=-1,
                         ignore_index=-100, max_grad_norm=1.0, parameters=params,
                         target="reference")


def _trajectory(c: tc.Case) -> str:
    import transformers  # lazy: only the trajectory needs it

    mapping, _ = tc.param_names(c)
    data = _data(c.name, STEPS)
    tr = _trainer(c, STEPS, list(mapping))
    got = [tr.step(**tm.numpy_inputs(i), labels=lab.numpy()) for i, lab in data]
    model = tm.attention_dropout_off(tm.make(c.name))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=3e-3, weight_decay=0.01)
    sched = transformers.get_cosine_schedule_with_warmup(opt, min(5, STEPS // 2), STEPS)
    want = []
    for inputs, labels in data:
        opt.zero_grad()
        loss = tm.loss_fn(model(*inputs.values()), labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        want.append(float(loss))
    rel = float(np.max(np.abs(np.array(got) - want) / np.abs(want)))
    return f"{rel:.1e} ({got[0]:.3f} -> {got[-1]:.3f})"


def _ort_step(c: tc.Case) -> str:
    import onnx
    import onnxruntime as ort

    assert c.graph is not None
    mapping, _ = tc.param_names(c)
    step = gradc.training_step(c.graph, _optimizer(ORT_STEPS), loss="cross_entropy",
                               parameters=list(mapping), class_axis=-1, ignore_index=-100,
                               max_grad_norm=1.0)
    model = gradc.to_onnx(step)
    onnx.checker.check_model(model, full_check=True)
    assert {n.domain for n in model.graph.node} == {""}
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    outs = [o.name for o in sess.get_outputs()]
    names = [p.name for p in step.parameters]
    data = _data(c.name, ORT_STEPS)
    tr = _trainer(c, ORT_STEPS, list(mapping))
    state: dict[str, Any] = {}
    worst = 0.0
    for t, (inputs, labels) in enumerate(data, 1):
        feeds = {**tm.numpy_inputs(inputs), "labels": labels.numpy()}
        r = dict(zip(outs, sess.run(None, {**feeds, "step": np.array([t], np.int64),
                                           **state})))
        state = {n: r[n + ".next"] for n in names}
        want = tr.step(**feeds)
        worst = max(worst, abs(float(r["loss"]) - want) / abs(want))
    return f"{worst:.1e}"


def row(name: str, form: str) -> list[str]:
    """One row of the table (see the module docstring)."""
    try:
        c = _make(name, form, torch.float32)
    except gradc.GradcError as e:
        return [name, form, f"no: {_first_line(e)}", "", "", "", "", ""]
    except Exception as e:  # the exporter's own failure (torch raises many kinds)
        return [name, form, f"export fails: {_first_line(e)}", "", "", "", "", ""]
    fwd = tc.rel_diff(tc.gradc_forward(c, "reference"), tc.ort_forward(c))
    g32 = _grads(c)
    try:
        g64 = f"{_grads(_make(name, form, torch.float64)):.1e}"
    except Exception as e:  # float64 exports fail where float32 ones do not (kernels, ops)
        g64 = f"n/a ({_first_line(e)[:60]})"
    return [name, form, "yes", f"{fwd:.1e}", f"{g32:.1e}", g64, _trajectory(c), _ort_step(c)]


def main(argv: list[str] | None = None) -> int:
    """Print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(tm.MODELS))
    p.add_argument("--forms", default=",".join(FORMS))
    args = p.parse_args(argv)
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    torch.set_num_threads(1)
    head = ["model", "export", "imports", "fwd/ort", "grad f32", "grad f64",
            f"trajectory ({STEPS} steps)", f"ort step ({ORT_STEPS})"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name in args.models.split(","):
        for form in args.forms.split(","):
            t0 = time.time()
            cells = row(name, form)
            print("| " + " | ".join(cells) + " |", flush=True)
            print(f"  ({time.time() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
