"""Per transformer: gradc.from_torch and the ONNX path (TorchScript training export, from_onnx)
against PyTorch.

The models, batches, optimizer and tolerances of tests/test_from_torch_transformers.py. Columns
(the largest difference over the largest magnitude of the expected array; a gradient against
the larger of its own and 1e-3 of the model's largest):

- grads f64 / grads f32: the gradients of the token loss against torch.autograd, float64 and
  float32 (from_torch only: the float32 ONNX path is issue 26's table);
- loss / state: the test's 4-step AdamW + WarmupCosine + clipping trajectory against
  torch.optim.AdamW + transformers' schedule + clip_grad_norm_ (float64), each loss, then every
  parameter after the run (transformers have no running statistics);
- vs ONNX graph: the from_torch graph's forward against the ONNX graph's, same input;
- params: how many of the module's trainable parameters the graph holds (from_torch: by
  state_dict name; the ONNX path: by name, else by an equal value). Those are the ones trained
  (``Trainer(parameters=...)``): the ONNX path's other initializers, such as a LoRA model's
  frozen base weights, are parameters there too.

Usage: ``python benchmarks/from_torch_transformers.py [--models gpt llama ...]``.
"""

from __future__ import annotations

import argparse
import copy
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import gradc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import test_from_torch_transformers as T  # noqa: E402


def _grads(p: Any) -> float:
    _, got, _, want = T.gradients(p)
    top = max(float(np.abs(w).max()) for w in want.values())
    shared = [n for n in want if n in got]
    return max(T.rel(got[n], want[n], T.GRAD_FLOOR * top) for n in shared)


def _onnx_names(p: Any, g: gradc.Graph) -> dict[str, str]:
    """gradc parameter -> PyTorch parameter: by name, else by an equal value."""
    params = {n: t.detach().numpy() for n, t in p.model.named_parameters() if t.requires_grad}
    out = {}
    for q in g.parameters:
        if q.name in params:
            out[q.name] = q.name
            continue
        same = [n for n, a in params.items() if a.shape == q.value.shape
                and np.array_equal(a, q.value)]
        if len(same) == 1:
            out[q.name] = same[0]
    return out


def _trajectory(p: Any, name: str, g: gradc.Graph, names: dict[str, str]) -> tuple[float, float]:
    batches = T._batches(name, torch.float64)
    ref = copy.deepcopy(p.model)
    want = T._torch_run(ref, batches)
    opt = T.O.AdamW(T.LR, betas=T.BETAS, eps=T.ADAM_EPS, weight_decay=T.DECAY,
                    schedule=T.O.WarmupCosine(T.WARMUP, T.TOTAL))
    tr = gradc.Trainer(g, opt, loss="cross_entropy", class_axis=-1, ignore_index=-100,
                       max_grad_norm=T.CLIP, target="reference", parameters=list(names))
    inputs = [v.name for v in g.inputs if v.name != "rng_state"]
    got = [tr.step(**{k: t.numpy() for k, t in zip(inputs, x)}, labels=y.numpy())
           for x, y in batches]
    loss = max(abs(a - b) / abs(b) for a, b in zip(got, want))
    sd = dict(ref.named_parameters())
    top = max(float(t.abs().max()) for t in sd.values())
    state = max(T.rel(tr.parameters[q], sd[n].detach().numpy(), T.GRAD_FLOOR * top)
                for q, n in names.items())
    return loss, state


def _onnx_graph(p: Any) -> gradc.Graph | str:
    try:
        return T._onnx_graph(p)
    except pytest.skip.Exception as e:
        return str(e.msg).split(":")[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=T.MODELS)
    args = ap.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    print("| model | path | params | grads f64 | grads f32 | loss | state | vs ONNX graph |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models:
        p = T.prepared(name)
        count = sum(1 for t in p.model.parameters() if t.requires_grad)
        f32 = _grads(T.prepared(name, torch.float32))
        names = {q.name: q.name for q in p.graph.parameters}
        loss, state = _trajectory(p, name, p.graph, names)
        onnx_graph = _onnx_graph(p)
        fwd = "-"
        if isinstance(onnx_graph, gradc.Graph):
            feeds = {**p.feeds(), **T._rng(onnx_graph)}
            ours = gradc.compile(p.graph, target="reference")(**p.feeds())["output"]
            theirs = gradc.compile(onnx_graph, target="reference")(**feeds)["output"]
            fwd = f"{T.rel(ours, theirs):.1e}"
        print(f"| {name} | from_torch | {len(names)}/{count} | {_grads(p):.1e} | {f32:.1e} | "
              f"{loss:.1e} | {state:.1e} | {fwd} |")
        if not isinstance(onnx_graph, gradc.Graph):
            print(f"| | ONNX | {onnx_graph} | | | | | |")
            continue
        onames = _onnx_names(p, onnx_graph)
        q = T.Prepared(p.model, p.inputs, p.labels, onnx_graph)
        _, got, _, want = T.gradients(q)
        top = max(float(np.abs(w).max()) for w in want.values())
        g64 = max(T.rel(got[k], want[n], T.GRAD_FLOOR * top) for k, n in onames.items())
        oloss, ostate = _trajectory(p, name, onnx_graph, onames)
        print(f"| | ONNX | {len(onames)}/{count} | {g64:.1e} | | {oloss:.1e} | {ostate:.1e} "
              f"| |")


if __name__ == "__main__":
    main()
