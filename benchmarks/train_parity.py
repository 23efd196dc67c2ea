"""Training parity with PyTorch: the same model, weights, batches and optimizer in gradc and torch.

    python benchmarks/train_parity.py [--steps 100] [--long-steps 300]
        [--models mlp,cnn] [--optimizers sgd_nesterov,sgd_dampening,adam,adamw]
        [--targets c,numpy,onnx,reference] [--out benchmarks/results] [--float64]

Two models on ``examples/digits.npz`` (8x8 digits, 10 classes), written in PyTorch:

- ``mlp``: flatten 64 -> Linear 32 -> ReLU -> Linear 10 (logits);
- ``cnn``: Conv 1->8 3x3 pad 1, BatchNorm2d, ReLU, MaxPool 2, Conv 8->16 3x3 pad 1,
  BatchNorm2d, ReLU, global average pool, Linear 16 -> 10. The convolutions have no bias, as
  usual before batch norm: such a bias has gradient 0 in exact arithmetic (the batch norm
  subtracts it again), so its computed gradient is pure rounding noise, which Adam normalizes
  into steps of size ``lr`` in random directions (measured with biases: gradc and PyTorch
  conv biases 100% apart after 100 Adam steps, while the losses agreed).

Float32 runs of the CNN can part from PyTorch suddenly: a ReLU input within a few float32
ulps of 0 (measured in an Adam run: at step 40 a batch-norm output of 4.1e-6, whose inputs
gradc and PyTorch round up to 5e-6 apart) takes the other side of the kink in one of them,
which changes that step's gradient by a few percent (conv2.weight: 4%); after that the runs
drift apart as two runs of a chaotic system do. Feeding gradc's pooled activations into
PyTorch's tail reproduces gradc's gradient to 2e-6, and in float64 gradc follows PyTorch
closely (``--float64``), so this is float32 rounding, not a different computation. The
"lockstep" columns remove the drift: before every step gradc is loaded with PyTorch's
parameters and optimizer state, so they show the error of one step (a kink shows there only
on the step where it happens).

Each is exported by the TorchScript exporter in training mode (``tests/real_models.py``
``export``, form ``ts_train``, opset 17: batch normalization with ``training_mode=1``) with a
static batch of 32, imported with ``gradc.from_onnx`` and trained with ``gradc.Trainer(g,
optimizer, loss="cross_entropy", target=T)``. PyTorch trains the same module from the same
``state_dict`` with ``F.cross_entropy`` and the ``torch.optim`` class of the same name and
hyperparameters, on the same fixed sequence of batches (a seeded permutation per epoch, full
batches of 32 only). Compared: the loss of every step and, at the end, every trained parameter
and the batch-norm running statistics (gradc's parameter names are the ``state_dict`` keys).

Running statistics (SPEC-training.md §12.5): ``running_mean`` is compared with PyTorch's own.
``running_var`` is not: gradc keeps ONNX's rule, which uses the biased batch variance
``sum((x - mean)^2) / n``, while PyTorch uses the unbiased ``/ (n - 1)``. A forward pre-hook on
every BatchNorm2d records PyTorch's batch input and replays ONNX's rule
(``rv = (1 - m) * rv + m * var_biased``, ``m`` PyTorch's momentum, in float64) beside
PyTorch's own update; gradc's
``running_var`` is compared with that replay. The same hook also replays PyTorch's unbiased
rule, and that replay is checked against PyTorch's ``running_var`` (so the hook sees what
BatchNorm sees). ``num_batches_tracked`` has no counterpart in gradc (it only matters for
``momentum=None``, which these models do not use).

The Markdown table (stdout) has, per model, optimizer and target: the largest absolute and
relative difference of the per-step losses, the largest absolute difference of the final
parameters (and that difference relative to the tensor's largest PyTorch value), the largest
difference of the running statistics, the final losses, and whether the c, numpy and reference
targets agree bit for bit (losses and every final parameter). One SVG of the loss curves
(PyTorch and every gradc target) per model and optimizer goes to
``<out>/parity_<model>_<optimizer>.svg``; the long MLP run goes to
``<out>/parity_mlp_<optimizer>_<steps>steps.svg``.

tests/test_train_parity.py imports this module (``build``, ``run_torch``, ``run_gradc``,
``compare``) and checks the same things at tolerances measured with this script.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import gradc
from gradc.curves import write_loss_curve

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import real_models as rm  # noqa: E402  (tests/ is not a package)

logging.getLogger("torch.onnx").setLevel(logging.ERROR)

DIGITS = ROOT / "examples" / "digits.npz"
BATCH = 32
MODELS = ("mlp", "cnn")
TARGETS = ("c", "numpy", "onnx", "reference")
BITEXACT = ("c", "numpy", "reference")


class DigitsMLP(nn.Module):
    """Flatten 64 -> Linear 32 -> ReLU -> Linear 10 (logits)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


class DigitsCNN(nn.Module):
    """Conv-BN-ReLU-MaxPool, Conv-BN-ReLU, global average pool, Linear 16 -> 10 (logits)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8, eps=BN_EPS, momentum=BN_MOMENTUM)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16, eps=BN_EPS, momentum=BN_MOMENTUM)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.relu(self.bn2(self.conv2(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


@dataclass(frozen=True)
class OptConfig:
    """One optimizer setting, built identically for gradc and torch.optim."""

    name: str
    kind: str                  # "sgd", "adam" or "adamw"
    kwargs: dict[str, Any] = field(default_factory=dict)

    def gradc(self) -> Any:
        """The ``gradc.optim`` object."""
        cls = {"sgd": gradc.optim.SGD, "adam": gradc.optim.Adam, "adamw": gradc.optim.AdamW}
        return cls[self.kind](**self.kwargs)

    def torch(self, params: Any) -> torch.optim.Optimizer:
        """The ``torch.optim`` object over ``params`` (default implementation: foreach)."""
        cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}
        return cls[self.kind](params, **self.kwargs)


# Non-default betas/eps and non-zero weight decay everywhere, so that every hyperparameter is
# carried over (a default on one side would hide a dropped argument). Every value is a dyadic
# fraction, exact in float32: gradc rounds float hyperparameters to float32 when it builds a
# node, for float64 tensors too (SPEC-training.md §7 "Float scalars"), while torch.optim keeps
# Python floats; with 0.995 for beta2, 1 - beta2 would differ by 9.5e-7 (relative) between the
# two, which is float32 noise but would hide everything else in the float64 comparison.
OPTIMIZERS: dict[str, OptConfig] = {c.name: c for c in (
    OptConfig("sgd_nesterov", "sgd", dict(lr=2**-4, momentum=0.875, weight_decay=2**-10,
                                          nesterov=True)),
    OptConfig("sgd_dampening", "sgd", dict(lr=2**-3, momentum=0.75, dampening=0.25,
                                           weight_decay=2**-11)),
    OptConfig("adam", "adam", dict(lr=2**-8, betas=(0.875, 0.9921875), eps=2**-24,
                                   weight_decay=2**-10)),
    OptConfig("adamw", "adamw", dict(lr=2**-8, betas=(0.75, 0.984375), eps=2**-20,
                                     weight_decay=2**-5)),
)}
# Batch norm: momentum 1/8 and epsilon 2^-17, exact in float32 (ONNX stores both as float32
# attributes; PyTorch's defaults 0.1 and 1e-5 are not, which matters in float64 only).
BN_MOMENTUM, BN_EPS = 0.125, 2.0**-17


def digits() -> tuple[np.ndarray, np.ndarray]:
    """examples/digits.npz: x float32 (1797, 1, 8, 8), labels int64 (1797,)."""
    with np.load(DIGITS) as d:
        return d["x"], d["labels"]


def batches(steps: int, seed: int = 0, dtype: str = "float32"
            ) -> list[tuple[np.ndarray, np.ndarray]]:
    """``steps`` batches of 32: a seeded permutation per epoch, full batches only."""
    x, labels = digits()
    x = x.astype(dtype)
    rng = np.random.default_rng(seed)
    out: list[tuple[np.ndarray, np.ndarray]] = []
    while len(out) < steps:
        perm = rng.permutation(len(x))
        for i in range(0, len(x) - BATCH + 1, BATCH):
            if len(out) == steps:
                break
            idx = perm[i:i + BATCH]
            out.append((np.ascontiguousarray(x[idx]), np.ascontiguousarray(labels[idx])))
    return out


@dataclass
class Built:
    """A PyTorch model, its initial state_dict, and the gradc graph imported from its export."""

    name: str
    module: nn.Module
    state: dict[str, torch.Tensor]
    graph: gradc.Graph


def build(name: str, seed: int = 0, dtype: str = "float32") -> Built:
    """Make the model from ``seed`` (in ``dtype``), export it (ts_train, static batch 32),
    import it.

    The export runs a training-mode forward, which moves PyTorch's running statistics (the
    exported running statistics are the moved ones); the state before it is kept and restored,
    and it is also the state both sides start from."""
    torch.manual_seed(seed)
    module = {"mlp": DigitsMLP, "cnn": DigitsCNN}[name]().to(getattr(torch, dtype))
    state = {k: v.detach().clone() for k, v in module.state_dict().items()}
    x, labels = batches(1, seed=12345, dtype=dtype)[0]
    blob = rm.export(module, "ts_train", torch.from_numpy(x), torch.from_numpy(labels))
    module.load_state_dict(state)
    return Built(name, module, state, gradc.from_onnx(blob))


def initial_state(b: Built) -> dict[str, np.ndarray]:
    """The gradc parameters' initial values, from PyTorch's initial state_dict (same names)."""
    return {p.name: b.state[p.name].numpy().copy() for p in b.graph.parameters}


# ---------------------------------------------------------------- PyTorch


@dataclass
class Run:
    """What one training run produced."""

    losses: list[float]
    params: dict[str, np.ndarray]          # trained parameters and running statistics
    seconds: float = 0.0
    onnx_running_var: dict[str, np.ndarray] = field(default_factory=dict)
    unbiased_replay: dict[str, np.ndarray] = field(default_factory=dict)


def run_torch(b: Built, opt: OptConfig, data: list[tuple[np.ndarray, np.ndarray]]) -> Run:
    """Train PyTorch's module from the initial state on ``data``; replay the running variance
    under ONNX's rule (biased batch variance) and PyTorch's, in float64, from the batch-norm
    inputs PyTorch sees."""
    torch.manual_seed(0)
    model = b.module
    model.load_state_dict(b.state)
    model.train()
    optimizer = opt.torch(model.parameters())
    onnx_rv: dict[str, np.ndarray] = {}
    torch_rv: dict[str, np.ndarray] = {}
    hooks = []
    for mname, m in model.named_modules():
        if isinstance(m, nn.BatchNorm2d):
            key = f"{mname}.running_var"
            onnx_rv[key] = b.state[key].double().numpy().copy()
            torch_rv[key] = b.state[key].double().numpy().copy()

            def hook(mod: nn.Module, inputs: tuple[torch.Tensor, ...], key: str = key) -> None:
                xin = inputs[0].detach().double()
                mom = float(mod.momentum)  # type: ignore[arg-type]
                biased = xin.var(dim=(0, 2, 3), unbiased=False).numpy()
                unbiased = xin.var(dim=(0, 2, 3), unbiased=True).numpy()
                onnx_rv[key] = (1 - mom) * onnx_rv[key] + mom * biased
                torch_rv[key] = (1 - mom) * torch_rv[key] + mom * unbiased

            hooks.append(m.register_forward_pre_hook(hook))
    losses = []
    t0 = time.perf_counter()
    try:
        for x, labels in data:
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(labels))
            loss.backward()
            optimizer.step()
            losses.append(float(loss.item()))
    finally:
        for h in hooks:
            h.remove()
    seconds = time.perf_counter() - t0
    params = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()
              if not k.endswith("num_batches_tracked")}
    model.load_state_dict(b.state)
    return Run(losses, params, seconds, onnx_rv, torch_rv)


# ---------------------------------------------------------------- gradc


def make_trainer(b: Built, opt: OptConfig, target: str) -> gradc.Trainer:
    """A compiled Trainer for ``target``, starting from PyTorch's initial state."""
    tr = gradc.Trainer(b.graph, opt.gradc(), loss="cross_entropy", target=target)
    reset(tr, b)
    return tr


def reset(tr: gradc.Trainer, b: Built) -> None:
    """Back to step 0: PyTorch's initial parameters, zero optimizer state (load_state_dict, so
    a compiled Trainer is reused between runs)."""
    init = initial_state(b)
    state = {k: (init[k] if k in init else np.zeros_like(v))
             for k, v in tr.state_dict().items() if k != "step"}
    state["step"] = np.array(0, np.int64)
    tr.load_state_dict(state)


def run_gradc(tr: gradc.Trainer, b: Built, data: list[tuple[np.ndarray, np.ndarray]]) -> Run:
    """Train with a (reset) Trainer on ``data``."""
    reset(tr, b)
    t0 = time.perf_counter()
    losses = [tr.step(x=x, labels=labels) for x, labels in data]
    return Run(losses, tr.parameters, time.perf_counter() - t0)


@dataclass
class Lockstep:
    """gradc vs PyTorch one step at a time, from the same state (PyTorch's) before every step:
    the error of one step, without the drift that builds up over many."""

    loss_abs: float          # max over steps of |loss_gradc - loss_torch|
    param_abs: float         # max over steps and trained parameters of |p_gradc - p_torch|
    param_rel: float         # max over steps and trained parameters of that / max |p_torch|
    state_rel: float         # the same for the optimizer state (momentum buffer, exp_avg, ...)
    mean_abs: float          # running_mean after the step vs PyTorch's
    var_rel: float           # running_var vs ONNX's rule on PyTorch's batch (relative)


def torch_state(model: nn.Module, optimizer: torch.optim.Optimizer, names: list[str],
                step: int) -> dict[str, np.ndarray]:
    """PyTorch's model and optimizer state as a gradc step state (``names``: its keys); the
    optimizer state PyTorch has not created yet (before the first step) is zeros."""
    sd = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    params = dict(model.named_parameters())
    out: dict[str, np.ndarray] = {}
    for key in names:
        if key == "step":
            out[key] = np.array(step, np.int64)
        elif key in sd:
            out[key] = sd[key]
        else:
            pname, _, field_ = key.rpartition(".")
            st = optimizer.state.get(params[pname], {}).get(field_)
            out[key] = (st.detach().numpy().copy() if st is not None
                        else np.zeros(params[pname].shape, sd[pname].dtype))
    return out


def run_lockstep(tr: gradc.Trainer, b: Built, opt: OptConfig,
                 data: list[tuple[np.ndarray, np.ndarray]]) -> Lockstep:
    """Before every step, load PyTorch's state into the Trainer; then step both and compare.
    ``running_var`` is checked against ONNX's rule applied to PyTorch's running_var before the
    step and the biased variance of the batch-norm input PyTorch saw (float64)."""
    model = b.module
    model.load_state_dict(b.state)
    model.train()
    optimizer = opt.torch(model.parameters())
    names = list(tr.state_dict())
    batch_var: dict[str, np.ndarray] = {}
    hooks = []
    for mname, m in model.named_modules():
        if isinstance(m, nn.BatchNorm2d):
            def hook(mod: nn.Module, inputs: tuple[torch.Tensor, ...],
                     key: str = f"{mname}.running_var") -> None:
                batch_var[key] = inputs[0].detach().double().var(
                    dim=(0, 2, 3), unbiased=False).numpy()
            hooks.append(m.register_forward_pre_hook(hook))
    r = Lockstep(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    try:
        for step, (x, labels) in enumerate(data):
            before = torch_state(model, optimizer, names, step)
            tr.load_state_dict(before)
            lg = tr.step(x=x, labels=labels)
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(labels))
            loss.backward()
            optimizer.step()
            after = torch_state(model, optimizer, names, step + 1)
            got = tr.state_dict()
            r.loss_abs = max(r.loss_abs, abs(lg - float(loss.item())))
            for k in names:
                if k == "step":
                    continue
                diff = float(np.max(np.abs(got[k].astype(np.float64) - after[k])))
                scale = max(float(np.max(np.abs(after[k]))), 1e-30)
                if k.endswith("running_mean"):
                    r.mean_abs = max(r.mean_abs, diff)
                elif k.endswith("running_var"):
                    want = (1 - BN_MOMENTUM) * before[k] + BN_MOMENTUM * batch_var[k]
                    r.var_rel = max(r.var_rel, float(np.max(np.abs(got[k] - want) / want)))
                elif k in dict(model.named_parameters()):
                    r.param_abs = max(r.param_abs, diff)
                    r.param_rel = max(r.param_rel, diff / scale)
                else:
                    r.state_rel = max(r.state_rel, diff / scale)
    finally:
        for h in hooks:
            h.remove()
        model.load_state_dict(b.state)
    return r


# ---------------------------------------------------------------- comparing


@dataclass
class Diff:
    """gradc vs PyTorch for one run."""

    loss_abs: float          # max over steps of |loss_gradc - loss_torch|
    loss_rel: float          # max over steps of that / |loss_torch|
    param_abs: float         # max over trained parameters of max |p_gradc - p_torch|
    param_rel: float         # max over trained parameters of that / max |p_torch|
    mean_abs: float          # running_mean vs PyTorch's (0 without batch norm)
    var_abs: float           # running_var vs ONNX's rule replayed on PyTorch's batches
    worst_param: str
    final: tuple[float, float]   # final loss, gradc and PyTorch


def compare(g: Run, t: Run) -> Diff:
    """The largest differences of ``g`` (gradc) from ``t`` (PyTorch)."""
    lg, lt = np.asarray(g.losses, np.float64), np.asarray(t.losses, np.float64)
    if lg.shape != lt.shape:
        raise ValueError(f"compare: {lg.size} gradc losses, {lt.size} PyTorch losses")
    d = np.abs(lg - lt)
    missing = sorted(set(t.params) - set(g.params)) + sorted(set(g.params) - set(t.params))
    if missing:
        raise ValueError(f"compare: parameter {missing[0]!r} is on one side only")
    pa = pr = ma = va = 0.0
    worst = ""
    for k, tv in t.params.items():
        diff = float(np.max(np.abs(g.params[k].astype(np.float64) - tv)))
        if k.endswith("running_mean"):
            ma = max(ma, diff)
        elif k.endswith("running_var"):
            replay = t.onnx_running_var[k]
            va = max(va, float(np.max(np.abs(g.params[k] - replay))))
        else:
            rel = diff / max(float(np.max(np.abs(tv))), 1e-30)
            if diff > pa:
                worst = k
            pa, pr = max(pa, diff), max(pr, rel)
    return Diff(float(d.max()), float(np.max(d / np.abs(lt))), pa, pr, ma, va, worst,
                (g.losses[-1], t.losses[-1]))


def bit_identical(a: Run, b: Run) -> str:
    """"yes", or the first thing that differs between two gradc runs."""
    la, lb = np.asarray(a.losses), np.asarray(b.losses)
    if not np.array_equal(la, lb):
        return f"loss of step {int(np.argmax(la != lb)) + 1}"
    for k in a.params:
        if a.params[k].tobytes() != b.params[k].tobytes():
            return k
    return "yes"


# ---------------------------------------------------------------- the benchmark


def _fmt(v: float) -> str:
    return "0" if v == 0 else f"{v:.2e}"


def run_matrix(models: list[str], opts: list[str], targets: list[str], steps: int,
               out: Path, log: Callable[[str], None], tag: str = "", dtype: str = "float32",
               lockstep: bool = True) -> list[str]:
    """Every model x optimizer x target; returns the Markdown rows, writes the SVGs."""
    rows = []
    data = batches(steps, dtype=dtype)
    for model in models:
        b = build(model, dtype=dtype)
        for oname in opts:
            opt = OPTIMIZERS[oname]
            t = run_torch(b, opt, data)
            curves = {"PyTorch": t.losses}
            runs: dict[str, Run] = {}
            locks: dict[str, Lockstep] = {}
            for target in targets:
                t0 = time.perf_counter()
                tr = make_trainer(b, opt, target)
                compile_s = time.perf_counter() - t0
                g = run_gradc(tr, b, data)
                runs[target] = g
                if lockstep:
                    locks[target] = run_lockstep(tr, b, opt, data)
                curves[f"gradc {target}"] = g.losses
                log(f"{model} {oname} {target}: compile {compile_s:.1f} s, "
                    f"{steps} steps {g.seconds:.2f} s (PyTorch {t.seconds:.2f} s)")
            base = next((runs[k] for k in BITEXACT if k in runs), None)
            for target, g in runs.items():
                d = compare(g, t)
                same = bit_identical(g, base) if target in BITEXACT and base is not None else ""
                lk = locks.get(target)
                lock = (f"{_fmt(lk.param_rel)} / {_fmt(lk.state_rel)}" if lk else "-")
                rows.append(f"| {model} | {dtype} | {oname} | {steps} | {target} | "
                            f"{_fmt(d.loss_abs)} | "
                            f"{_fmt(d.loss_rel)} | {_fmt(d.param_abs)} ({d.worst_param}) | "
                            f"{_fmt(d.param_rel)} | {_fmt(d.mean_abs) if model == 'cnn' else '-'}"
                            f" | {_fmt(d.var_abs) if model == 'cnn' else '-'} | "
                            f"{d.final[0]:.5f} / {d.final[1]:.5f} | {lock} | {same} |")
            if model == "cnn":
                check_unbiased_replay(t)
            name = f"parity_{model}_{oname}{tag}.svg"
            if dtype != "float32":
                name = f"parity_{model}_{oname}{tag}_{dtype}.svg"
            write_loss_curve(out / name, curves,
                             title=f"{model}, {oname}: gradc vs PyTorch ({steps} steps, "
                                   f"{dtype})")
            log(f"wrote {out / name}")
    return rows


def check_unbiased_replay(t: Run) -> float:
    """The hook's replay of PyTorch's own rule against PyTorch's running_var: proves the hook
    sees BatchNorm's input (float64 replay vs float32 state: about 1e-7 relative)."""
    worst = 0.0
    for k, v in t.unbiased_replay.items():
        rel = float(np.max(np.abs(t.params[k] - v) / np.abs(v)))
        if rel > 1e-5:
            raise AssertionError(f"the unbiased replay of {k} is off by {rel:.2e} (relative)")
        worst = max(worst, rel)
    return worst


HEADER = ("| model | dtype | optimizer | steps | target | max abs loss diff | max rel loss diff | "
          "max abs param diff (worst) | max rel param diff | running_mean diff | "
          "running_var diff (vs ONNX rule) | final loss gradc / PyTorch | lockstep max rel "
          "param / opt-state diff | c = numpy = reference bits |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def main(argv: list[str] | None = None) -> int:
    """Run the matrix and the long MLP run, print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--long-steps", type=int, default=300, help="0: no long MLP run")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--optimizers", default=",".join(OPTIMIZERS))
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--float64", action="store_true",
                    help="also run every model and optimizer in float64 (c, numpy, reference)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    models, opts = args.models.split(","), args.optimizers.split(",")
    targets = args.targets.split(",")

    def log(s: str) -> None:
        print(s, file=sys.stderr, flush=True)

    rows = run_matrix(models, opts, targets, args.steps, out, log)
    if args.long_steps and "mlp" in models:
        rows += run_matrix(["mlp"], opts, targets, args.long_steps, out, log,
                           tag=f"_{args.long_steps}steps")
    if args.float64:
        rows += run_matrix(models, opts, [t for t in targets if t != "onnx"], args.steps, out,
                           log, dtype="float64")
    print(f"torch {torch.__version__}, numpy {np.__version__}, batch {BATCH}, "
          f"torch threads 1\n")
    print(HEADER)
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
