"""SPEC-training.md §9.5's tolerance for summing ops computed in another order than canonical.

An element that sums ``n`` terms and then takes ``k`` further roundings must satisfy
``|got - ref| <= (n + k + 1)·ε·S + η`` (float32: ε = 2⁻²³, η = 2⁻¹²⁶; float64: 2⁻⁵², 2⁻¹⁰²²;
float16: ``2⁻⁹·S + 2⁻²⁴``), where ``S`` is the same computation on absolute values (every input
replaced by its absolute value, every subtraction by an addition). The helpers give ``S``,
``n`` and ``k`` per element, in float64, for the ops the cuda target's ``sums="split"``
reorders: reductions, products (gemm, convolution, the filter gradient) and the batch
normalization ops (§12's ``n`` and ``k``, with ``S`` by error propagation as
``tests/test_batch_norm.py`` derives it).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

EPS = {np.dtype(np.float32): (2.0 ** -23, 2.0 ** -126),
       np.dtype(np.float64): (2.0 ** -52, 2.0 ** -1022)}
F64 = np.float64


def bound(dtype: Any, s: np.ndarray, n: Any, k: int) -> np.ndarray:
    """§9.5's allowed |got - ref| per element."""
    dtype = np.dtype(dtype)
    s = np.asarray(s, F64)
    if dtype == np.float16:
        return 2.0 ** -9 * s + 2.0 ** -24
    eps, eta = EPS[dtype]
    return (np.asarray(n, F64) + k + 1) * eps * s + eta


def assert_within(got: Any, want: np.ndarray, tol: np.ndarray, what: str = "") -> None:
    """NaN where the reference has NaN, infinities equal, the other elements within ``tol``
    (elements whose ``tol`` is not finite -- a non-finite input in their sum -- only as to
    NaN and infinity)."""
    got = np.asarray(got)
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.dtype, got.shape)
    nan, inf = np.isnan(want), np.isinf(want)
    assert (np.isnan(got) == nan).all(), (what, "NaN positions differ")
    assert (got[inf] == want[inf]).all(), (what, "infinities differ")
    tol = np.broadcast_to(np.asarray(tol, F64), want.shape)
    ok = ~nan & ~inf & np.isfinite(tol)
    err = np.abs(got[ok].astype(F64) - want[ok].astype(F64))
    bad = err > tol[ok]
    assert not bad.any(), (what, got[ok][bad][:5], want[ok][bad][:5], tol[ok][bad][:5])


def reduce_bound(x: np.ndarray, axes: Sequence[int] | None, mean: bool = False,
                 keepdims: bool = False) -> np.ndarray:
    """reduce_sum (``k = 0``) or reduce_mean (``k = 1``: the division) of ``x``."""
    ax = tuple(range(x.ndim)) if axes is None else tuple(axes)
    n = int(np.prod([x.shape[a] for a in ax]))
    with np.errstate(invalid="ignore", over="ignore"):
        s = np.abs(x.astype(F64)).sum(axis=ax, keepdims=keepdims)
    return bound(x.dtype, s / n if mean else s, n, 1 if mean else 0)


def product_bound(run: Callable[..., Mapping[str, np.ndarray]], feeds: Mapping[str, np.ndarray],
                  extra: int, zero: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """A bound per output of a graph of products (convolutions, filter gradients, gemms with
    alpha = 1 and no c): ``run`` is the reference (a callable of the feeds); ``S``
    is its result on the inputs' absolute values, ``n`` its result on ones (the inputs named
    in ``zero`` -- the biases -- zeros: the count of products of each element); ``extra`` is
    ``k`` (1 for a bias)."""
    dtype = next(iter(feeds.values())).dtype
    with np.errstate(invalid="ignore", over="ignore"):
        s = run(**{k: np.abs(v) for k, v in feeds.items()})
    n = run(**{k: (np.zeros_like if k in zero else np.ones_like)(v) for k, v in feeds.items()})
    return {k: bound(dtype, s[k].astype(F64), n[k].astype(F64), extra) for k in s}


def gemm_bound(a: np.ndarray, b: np.ndarray, c: np.ndarray | None, alpha: float, beta: float,
               trans_a: bool = False, trans_b: bool = False) -> np.ndarray:
    """gemm (SPEC-training §11): ``n = K``; ``k`` is 1 (``alpha·acc``), or 3 with ``c``."""
    A, B = np.abs(a.astype(F64)), np.abs(b.astype(F64))
    A = np.swapaxes(A, -1, -2) if trans_a else A
    B = np.swapaxes(B, -1, -2) if trans_b else B
    with np.errstate(invalid="ignore", over="ignore"):
        s = abs(alpha) * (A @ B)
        if c is not None and beta != 0:
            s = s + abs(beta) * np.abs(c.astype(F64))
    return bound(a.dtype, s, A.shape[-1], 3 if c is not None and beta != 0 else 1)


def batch_norm_bounds(op: str, a: Mapping[str, np.ndarray], eps: float
                      ) -> list[np.ndarray]:
    """The bounds of a batch-normalization op's results (``a``: ``x``, ``scale`` and
    ``bias``, or ``x``, ``dy``, ``mean``, ``var``, ``scale``), per element."""
    out = []
    for s, terms in batch_norm_terms(op, a, eps):
        out.append(bound(a["x"].dtype, s, terms, 0))
    return out


def batch_norm_terms(op: str, a: Mapping[str, np.ndarray], eps: float
                     ) -> list[tuple[np.ndarray, int]]:
    """(S, n + k) per result of a batch-normalization op, from the computation on absolute
    values in float64 (§12's statistics ``n`` terms ``k = 1``; the outputs' ``k`` from their
    element-wise steps)."""
    d = {k: np.abs(v.astype(F64)) for k, v in a.items()}
    axes = tuple(i for i, p in enumerate(a["scale"].shape) if p == 1)
    n = int(np.prod([a["x"].shape[i] for i in axes]))

    def s(t: np.ndarray) -> np.ndarray:
        return np.sum(t, axis=axes, keepdims=True)

    if op == "batch_normalization_training":
        x = a["x"].astype(F64)
        mean = s(x) / n
        var = s((x - mean) ** 2) / n
        ve = var + eps
        sm = s(d["x"]) / n
        sv = s((d["x"] + sm) ** 2) / n
        sy = d["scale"] * (d["x"] + sm) / np.sqrt(ve) * (1 + sv / ve) + d["bias"]
        return [(sy, n + 8), (sm, n + 1), (sv, n + 2)]
    ve = d["var"] + eps
    dev = np.sqrt(ve)
    cen = d["x"] + d["mean"]
    sdyt = s(d["dy"] * cen)
    if op == "batch_normalization_grad":
        return [(d["dy"] * d["scale"] / dev, 4), (sdyt / dev, n + 2), (s(d["dy"]), n + 1)]
    sdx = d["scale"] / dev * (d["dy"] + s(d["dy"]) / n + cen * sdyt / n / ve)
    return [(sdx, n + 10), (sdyt / dev, n + 2), (s(d["dy"]), n + 1)]
