"""The cases of bench_kernels.py: each gradc graph, and the same function in PyTorch and NumPy.

Every function here computes exactly what the gradc graph computes (bench_kernels.py checks it
against gradc's reference target before timing); the notes in bench_kernels.py's report say how
the PyTorch and NumPy versions were aligned with gradc's semantics.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

import gradc
from gradc import ops

try:
    import torch
except ImportError:  # the PyTorch peers then show n/a
    torch = None

BIG = (32, 64, 56, 56)
HALF = (32, 64, 28, 28)
F32 = np.float32
ZERO = np.float32(0)
QUICK_CASES = ("relu_grad", "chain3", "maxpool_3x3s2p1", "resample_linear_2x")


@dataclass
class Case:
    """One benchmark: a gradc graph with output "dx", its arrays, and the peers' versions."""

    name: str
    graph: gradc.Graph
    arrays: dict[str, np.ndarray]
    exact: bool                      # an exact op: bit-identical results expected
    torch_fn: Callable[..., Any]     # takes torch tensors in graph-input order
    plain_fn: Callable[..., np.ndarray]
    plain_label: str
    target: tuple[float, str]        # issue 5: C must be this many times faster than ...

    def inputs(self) -> list[np.ndarray]:
        """The arrays in graph-input order."""
        return [self.arrays[v.name] for v in self.graph.inputs]

    def megabytes(self) -> float:
        """Compulsory traffic: every input read once, the output written once."""
        values = [*self.graph.inputs, *self.graph.outputs]
        return sum(4 * int(np.prod(v.type.shape)) for v in values) / 1e6


def _graph(name: str, inputs: list[tuple[str, tuple]], body: Callable) -> gradc.Graph:
    g = gradc.Graph(name)
    g.output(body(*[g.input(n, "float32", s) for n, s in inputs]), "dx")
    return g


def _arrays(seed: int, g: gradc.Graph, **scale: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([seed, zlib.crc32(g.name.encode())])  # same arrays whatever runs
    out = {}
    for v in g.inputs:
        a = rng.standard_normal(v.type.shape, dtype=F32)
        a *= F32(scale.get(v.name, 1.0))
        out[v.name] = a
    return out


# Each torch function is its own top-level function, so torch.compile keeps separate caches.
def torch_relu_grad(x, dy):
    return torch.ops.aten.threshold_backward(dy, x, 0.0)


def torch_clip_grad(x, dy):
    return torch.ops.aten.hardtanh_backward(dy, x, 0.0, 6.0)


def torch_chain3(a, b, c, dy):
    aten = torch.ops.aten
    return aten.threshold_backward(
        aten.hardtanh_backward(aten.threshold_backward(dy, c, 0.0), b, 0.0, 6.0), a, 0.0)


def torch_slice_grad(dy):
    dx = dy.new_zeros(BIG)
    dx[:, :, ::2, ::2] = dy
    return dx


def _torch_pool_grad(x, dy, k: int, s: int, p: int):
    _, idx = torch.nn.functional.max_pool2d(x, k, s, p, return_indices=True)
    return torch.ops.aten.max_pool2d_with_indices_backward(
        dy, x, [k, k], [s, s], [p, p], [1, 1], False, idx)


def torch_pool_3x3(x, dy):
    return _torch_pool_grad(x, dy, 3, 2, 1)


def torch_pool_2x2(x, dy):
    return _torch_pool_grad(x, dy, 2, 2, 0)


def torch_resample_nearest(dy):
    return torch.ops.aten.upsample_nearest2d_backward(dy, [56, 56], list(HALF))


def torch_resample_linear(dy):
    return torch.ops.aten.upsample_bilinear2d_backward(dy, [56, 56], list(HALF), False)


# relu/clip gradients as an integer multiply of dy's bits by the mask: as fast as dy * mask,
# but bit-exact (+0.0 where masked, never -0.0), as these exact ops require.
def _keep_where(mask, dy):
    return (dy.view(np.uint32) * mask).view(F32)


def plain_relu_grad(x, dy):
    return _keep_where(x > 0, dy)


def plain_clip_grad(x, dy):
    return _keep_where(~((x <= 0) | (x >= 6)), dy)


def plain_chain3(a, b, c, dy):
    return _keep_where((a > 0) & ~((b <= 0) | (b >= 6)) & (c > 0), dy)


def plain_slice_grad(dy):
    dx = np.zeros(BIG, F32)
    dx[:, :, ::2, ::2] = dy
    return dx


def _plain_pool_grad(x, dy, k: int, s: int, p: int):
    n, c, h, w = x.shape
    oh, ow = dy.shape[2:]
    size = (n, c, max(h + 2 * p, (oh - 1) * s + k), max(w + 2 * p, (ow - 1) * s + k))
    xp = np.full(size, -np.inf, F32)
    xp[:, :, p:p + h, p:p + w] = x
    taps = [(i, j) for i in range(k) for j in range(k)]   # increasing logical index

    def window(a, i, j):
        return a[:, :, i:i + (oh - 1) * s + 1:s, j:j + (ow - 1) * s + 1:s]

    arg = np.argmax(np.stack([window(xp, i, j) for i, j in taps]), axis=0)  # first max wins
    dxp = np.zeros_like(xp)
    for t, (i, j) in enumerate(taps):
        view = window(dxp, i, j)
        view += np.where(arg == t, dy, ZERO)
    return dxp[:, :, p:p + h, p:p + w].copy()


def plain_pool_3x3(x, dy):
    return _plain_pool_grad(x, dy, 3, 2, 1)


def plain_pool_2x2(x, dy):
    return _plain_pool_grad(x, dy, 2, 2, 0)


def plain_resample_nearest(dy):
    along_w = dy[..., 0::2] + dy[..., 1::2]            # dx[i] = dy[2i] + dy[2i + 1] per axis
    return along_w[:, :, 0::2] + along_w[:, :, 1::2]


def _linear_2x_adjoint(d):
    """Adjoint of a half-pixel 2x linear upsample along the last axis (edges clamped)."""
    even, odd = d[..., 0::2], d[..., 1::2]
    out = F32(0.75) * (even + odd)
    out[..., 1:] += F32(0.25) * odd[..., :-1]
    out[..., :-1] += F32(0.25) * even[..., 1:]
    out[..., 0] += F32(0.25) * even[..., 0]
    out[..., -1] += F32(0.25) * odd[..., -1]
    return out


def plain_resample_linear(dy):
    along_w = _linear_2x_adjoint(dy)
    return np.ascontiguousarray(_linear_2x_adjoint(along_w.swapaxes(2, 3)).swapaxes(2, 3))


def _elementwise_cases(seed: int) -> dict[str, Callable[[], Case]]:
    def relu() -> Case:
        g = _graph("relu_grad", [("x", BIG), ("dy", BIG)], ops.relu_grad)
        return Case("relu_grad", g, _arrays(seed, g, x=4), True, torch_relu_grad,
                    plain_relu_grad, "dy bits * (x > 0) (uint32 view)", (1.3, "fastest peer"))

    def clip() -> Case:
        g = _graph("clip_grad", [("x", BIG), ("dy", BIG)],
                   lambda x, dy: ops.clip_grad(x, dy, 0.0, 6.0))
        return Case("clip_grad", g, _arrays(seed, g, x=4), True, torch_clip_grad,
                    plain_clip_grad, "dy bits * ~((x <= 0) | (x >= 6))",
                    (1.3, "fastest peer"))

    def chain() -> Case:
        g = _graph("chain3", [("a", BIG), ("b", BIG), ("c", BIG), ("dy", BIG)],
                   lambda a, b, c, dy: ops.relu_grad(
                       a, ops.clip_grad(b, ops.relu_grad(c, dy), 0.0, 6.0)))
        return Case("chain3", g, _arrays(seed, g, a=4, b=4, c=4), True, torch_chain3,
                    plain_chain3, "dy bits * one combined mask", (1.2, "torch.compile"))

    def slice_() -> Case:
        g = _graph("slice_grad", [("dy", HALF)], lambda dy: ops.slice_grad(
            dy, BIG, (0, 0, 0, 0), BIG, (1, 1, 2, 2)))
        return Case("slice_grad", g, _arrays(seed, g), True, torch_slice_grad,
                    plain_slice_grad, "np.zeros + strided assignment", (1.0, "fastest peer"))

    return {"relu_grad": relu, "clip_grad": clip, "chain3": chain, "slice_grad": slice_}


def _window_cases(seed: int) -> dict[str, Callable[[], Case]]:
    def pool(k: int, s: int, p: int, name: str, tfn: Callable, pfn: Callable) -> Case:
        g = _graph(name, [("x", BIG), ("dy", HALF)], lambda x, dy: ops.max_pooling_grad(
            x, dy, (k, k), (s, s), (p, p), (p, p), (1, 1)))
        return Case(name, g, _arrays(seed, g), False, tfn, pfn,
                    "padded window views, argmax over stacked taps, masked adds",
                    (4.0, "fastest peer"))

    def nearest() -> Case:
        g = _graph("resample_nearest_2x", [("dy", BIG)], lambda dy: ops.resample_grad(
            dy, HALF, (1, 1, 2, 2), "nearest", "decreasing", (0, 0, 0, 0), (0, 0, 0, 0)))
        return Case("resample_nearest_2x", g, _arrays(seed, g), False, torch_resample_nearest,
                    plain_resample_nearest, "two strided adds (one per axis)",
                    (1.0, "fastest peer"))

    def linear() -> Case:
        g = _graph("resample_linear_2x", [("dy", BIG)],
                   lambda dy: ops.resample_grad(dy, HALF, (1, 1, 2, 2), "linear"))
        return Case("resample_linear_2x", g, _arrays(seed, g), False, torch_resample_linear,
                    plain_resample_linear, "separable 1-D stencil adjoint (slices)",
                    (2.0, "fastest peer"))

    return {
        "maxpool_3x3s2p1": lambda: pool(3, 2, 1, "maxpool_3x3s2p1", torch_pool_3x3,
                                        plain_pool_3x3),
        "maxpool_2x2s2": lambda: pool(2, 2, 0, "maxpool_2x2s2", torch_pool_2x2, plain_pool_2x2),
        "resample_nearest_2x": nearest,
        "resample_linear_2x": linear,
    }


def case_builders(seed: int) -> dict[str, Callable[[], Case]]:
    """Case name -> a function that allocates and returns the case (arrays made on demand)."""
    return {**_elementwise_cases(seed), **_window_cases(seed)}
