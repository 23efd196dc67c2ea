"""Per real model: gradc.from_torch and the ONNX path (TorchScript training export, from_onnx)
against PyTorch, in float64.

Columns (the largest difference, relative to the largest value of the same kind):
- gradients: the weight gradients of the model with its loss against torch.autograd;
- trajectory: ``--steps`` steps of gradc.Trainer (reference target) against torch.optim from the
  same state and batches (the optimizers of tests/test_from_torch_models.py, hyperparameters
  exact in float32): the losses, the weights, the running means and the running variances;
- forward: the from_torch graph against the ONNX graph, same input (training mode).

The ONNX path's running variance is ONNX's (biased batch variance) and its momentum float32, so
its running statistics part from PyTorch's by design (docs/training.md). Usage:
``python benchmarks/from_torch_parity.py [--steps 3] [--models ...]``.
"""

from __future__ import annotations

import argparse
import copy
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

import gradc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import real_models as rm  # noqa: E402
import test_from_torch_models as T  # noqa: E402


def _grad_error(g: gradc.Graph, module: Any, x: Any, labels: Any, prefix: str) -> float:
    m = copy.deepcopy(module)
    m.zero_grad()
    rm.WithLoss(m)(x, labels).backward()
    want = {f"grad_{prefix}{n}": t.grad.numpy() for n, t in m.named_parameters()}
    train = gradc.grad(g, wrt="parameters")
    feeds = {"x": x.numpy(), "target": labels.numpy()}
    if any(v.name == "rng_state" for v in g.inputs):
        feeds["rng_state"] = np.zeros(6, np.uint32)
    got = gradc.compile(train, target="reference")(
        **feeds, **{f"grad_{g.outputs[0].name}": np.ones(())})
    scale = max(float(np.abs(w).max()) for w in want.values())
    return max(float(np.abs(got[n] - w).max()) for n, w in want.items()) / scale


def _onnx_loss_graph(module: Any, x: Any, labels: Any) -> gradc.Graph:
    return gradc.from_onnx(rm.export(copy.deepcopy(module), "ts_train_loss", x, labels))


def _trajectory(g: gradc.Graph, p: Any, name: str, steps: int) -> dict[str, float]:
    c = T.CASES[name]
    ref = copy.deepcopy(p.model)
    want = T._torch_losses(ref, c.torch_opt(ref.parameters()), name, p.xs[:steps],
                           p.labels[:steps])
    tr = gradc.Trainer(g, c.gradc_opt, loss="cross_entropy", target="reference")
    rng = {"rng_state": np.zeros(6, np.uint32)} if any(
        v.name == "rng_state" for v in g.inputs) else {}
    got = [tr.step(x=x.numpy(), labels=y.numpy(), **{k: v for k, v in rng.items()
                                                      if k in tr.batch_names})
           for x, y in zip(p.xs[:steps], p.labels[:steps])]
    out = {"loss": max(abs(a - b) / abs(b) for a, b in zip(got, want))}
    sd = ref.state_dict()
    kinds: dict[str, list[str]] = {}
    for n in tr.parameters:
        kind = n.rsplit(".", 1)[-1]
        kinds.setdefault("running_mean" if kind == "running_mean" else "running_var"
                         if kind == "running_var" else "weights", []).append(n)
    for kind, names in kinds.items():
        if not sd[names[0]].dtype.is_floating_point:
            continue
        scale = max(float(sd[n].abs().max()) for n in names)
        out[kind] = max(float(np.abs(tr.parameters[n] - sd[n].numpy()).max())
                        for n in names) / scale
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(T.CASES))
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    programs: dict[str, Any] = {}
    print("| model | path | gradients | loss | weights | running_mean | running_var | "
          "forward vs ONNX graph |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models:
        p = T.prepared(programs, name)
        x, labels = p.xs[0], p.labels[0]
        module = rm.WithLoss(p.model)
        ours = gradc.from_torch(copy.deepcopy(module), (x, labels))
        theirs = _onnx_loss_graph(p.model, x, labels)
        onnx_graph = T._onnx(p.model, x, "train")
        fwd_ours = T._run(p.train, x)["output"]
        fwd_onnx = T._run(onnx_graph, x, copy.deepcopy(p.model.state_dict()))["y"]
        fwd = float(np.abs(fwd_ours - fwd_onnx).max() / np.abs(fwd_onnx).max())
        for path, g_loss, g in (("from_torch", ours, p.train), ("ONNX", theirs, onnx_graph)):
            grad = _grad_error(g_loss, p.model, x, labels, "model.")
            if path == "ONNX":  # its initializers moved in the export: start from the module's
                for q in g.parameters:
                    if q.name in p.model.state_dict():
                        q.value[...] = p.model.state_dict()[q.name].numpy()
            t = _trajectory(g, p, name, args.steps)
            cells = [f"{t.get(k, float('nan')):.1e}" if k in t else "-" for k in
                     ("loss", "weights", "running_mean", "running_var")]
            print(f"| {name} | {path} | {grad:.1e} | {' | '.join(cells)} | "
                  f"{fwd:.1e} |" if path == "from_torch" else
                  f"| | {path} | {grad:.1e} | {' | '.join(cells)} | |")


if __name__ == "__main__":
    main()
