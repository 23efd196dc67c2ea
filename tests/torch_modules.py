"""Small PyTorch modules that exercise the ATen table of gradc.from_torch (test-only).

Each case is a module and example inputs; ``check`` translates it with ``gradc.from_torch``,
runs the reference target, and compares the outputs and the gradients (with respect to the
inputs and every parameter, for random cotangents) with PyTorch's forward and autograd, in
float64 so that a wrong result is never hidden by rounding.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

import gradc

RTOL = 1e-10


def rand(*shape: int, seed: int = 0) -> torch.Tensor:
    """A float64 tensor of standard normal values."""
    return torch.randn(tuple(shape), generator=torch.Generator().manual_seed(seed),
                       dtype=torch.float64)


class Fn(nn.Module):
    """A module around a function of its inputs (and of its own parameters ``p``, if any)."""

    def __init__(self, fn: Callable[..., Any], **params: torch.Tensor) -> None:
        super().__init__()
        self.fn = fn
        for k, v in params.items():
            setattr(self, k, nn.Parameter(v))

    def forward(self, *xs: torch.Tensor) -> Any:
        return self.fn(self, *xs)


def close(got: np.ndarray, want: np.ndarray, what: str, rel: float = RTOL,
          scale: float | None = None) -> None:
    """Equal within ``rel`` of ``scale`` (default: the largest magnitude of ``want``); bool and
    integers exactly."""
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    if scale is None:
        scale = float(np.max(np.abs(want))) if want.size else 0.0
    np.testing.assert_allclose(got, want, rtol=rel, atol=rel * scale + 1e-300, err_msg=what)


def _flat(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [t for v in out.values() for t in _flat(v)]
    return [t for v in out for t in _flat(v)]


def check(module: nn.Module, *inputs: torch.Tensor, grads: bool = True,
          rel: float = RTOL) -> gradc.Graph:
    """Translate ``module`` (in its mode) and compare forward and gradients with PyTorch."""
    ref = copy.deepcopy(module)
    g = gradc.from_torch(module, inputs)
    names = [v.name for v in g.inputs if v.name != "rng_state"]
    feeds = {n: t.detach().numpy() for n, t in zip(names, inputs)}
    if any(v.name == "rng_state" for v in g.inputs):
        feeds["rng_state"] = np.array([0, 0, 0, 0, 7, 0], np.uint32)
    got = gradc.compile(g, target="reference")(**feeds)
    leaves = [t.detach().clone().requires_grad_(t.dtype.is_floating_point) for t in inputs]
    want = _flat(ref(*leaves))
    user = [o.name for o in g.outputs if not o.name.endswith(".next")
            and o.name != "rng_state_out"]
    assert len(user) == len(want), (user, [tuple(w.shape) for w in want])
    for name, w in zip(user, want):
        close(got[name], w.detach().numpy(), f"output {name}", rel)
    state = {k: v for k, v in ref.state_dict().items()}
    for o in g.outputs:
        if o.name.endswith(".next"):
            close(got[o.name], state[o.name[:-5]].numpy(), f"state {o.name}", rel)
    if grads:
        _check_grads(g, ref, feeds, leaves, want, user, rel)
    return g


def _check_grads(g: gradc.Graph, ref: nn.Module, feeds: dict, leaves: list, want: list,
                 user: list[str], rel: float) -> None:
    params = dict(ref.named_parameters())
    floats = [(n, t) for n, t in zip(feeds, leaves) if t.requires_grad]
    wrt = [n for n, _ in floats] + [p.name for p in g.parameters if p.name in params]
    pairs = [(n, w) for n, w in zip(user, want) if w.dtype.is_floating_point and w.requires_grad]
    if not wrt or not pairs:
        return
    train = gradc.grad(g, wrt=wrt)
    cots = {n: rand(*w.shape, seed=7 + i) for i, (n, w) in enumerate(pairs)}
    tensors = [t for _, t in floats] + [params[n] for n in wrt[len(floats):]]
    expected = torch.autograd.grad([w for _, w in pairs], tensors,
                                   [cots[n] for n, _ in pairs], allow_unused=True)
    extra = {f"grad_{o.name}": np.zeros(o.type.shape, o.type.dtype.numpy)
             for o in g.outputs if f"grad_{o.name}" in {v.name for v in train.inputs}}
    extra.update({f"grad_{n}": c.numpy() for n, c in cots.items()})
    got = gradc.compile(train, target="reference")(**feeds, **extra)
    wants = [np.zeros(got[f"grad_{n}"].shape) if e is None else e.numpy()
             for n, e in zip(wrt, expected)]
    # Relative to the largest gradient: a bias ahead of a batch norm has the gradient 0 in
    # exact arithmetic, and holds rounding noise in both.
    scale = max(float(np.abs(w).max()) for w in wants)
    for n, w in zip(wrt, wants):
        close(got[f"grad_{n}"], w, f"gradient of {n}", rel, scale)
