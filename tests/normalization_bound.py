"""SPEC-transformers.md §24.4: the error bound of mean_variance_normalization and its gradient.

``|got - ref| <= (n + k + 1)·ε·S + η`` per element (float16: ``2⁻⁹·S + 2⁻²⁴``), with ``S`` from
error propagation (§24.4's table): ``μ`` the mean of ``|x|`` over the group (0 without
``use_mean``), ``σ = 1/inv`` (1 without ``use_variance``), ``z`` the normalized value, ``s``,
``b`` the scale and bias at the element (1 and 0 when absent), ``g = dY·s``, ``m`` the number
of elements summed into a scale element. Everything is computed in float64 from the inputs.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

EPS = {np.dtype(np.float32): (2.0 ** -23, 2.0 ** -126), np.dtype(np.float64): (2.0 ** -52,
                                                                                 2.0 ** -1022)}


def _bound(dtype: Any, s: np.ndarray, n: Any, k: int) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype == np.float16:
        return 2.0 ** -9 * s + 2.0 ** -24
    eps, eta = EPS[dtype]
    return (np.asarray(n, np.float64) + k + 1) * eps * s + eta


def _group_mean(t: np.ndarray, axes: Sequence[int]) -> np.ndarray:
    return t.mean(axis=tuple(axes), keepdims=True)


def _stats(x: np.ndarray, axes: Sequence[int], um: bool, uv: bool, eps: float):
    """(z, mu, sigma, n) in float64."""
    x = x.astype(np.float64)
    n = int(np.prod([x.shape[a] for a in axes]))
    d = x - _group_mean(x, axes) if um else x
    mu = _group_mean(np.abs(x), axes) if um else np.zeros_like(x[..., :1])
    if uv:
        sigma = np.sqrt(_group_mean(d * d, axes) + float(np.float32(eps)))
        z = d / sigma
    else:
        sigma, z = np.ones_like(mu), d
    return z, mu, sigma, n


def _param(p: np.ndarray | None, x: np.ndarray, default: float) -> np.ndarray:
    if p is None:
        return np.full(x.shape, default)
    return np.broadcast_to(p.astype(np.float64), x.shape)


def forward_bound(x: np.ndarray, scale: np.ndarray | None, bias: np.ndarray | None,
                  axes: Sequence[int], um: bool = True, uv: bool = True,
                  eps: float = 1e-5) -> np.ndarray:
    """The bound of ``mean_variance_normalization``'s output, per element (n, k = 8)."""
    z, mu, sigma, n = _stats(x, axes, um, uv, eps)
    s, b = _param(scale, x, 1.0), _param(bias, x, 0.0)
    S = (1 + np.abs(z)) * (1 + mu / sigma) * np.abs(s) + np.abs(b)
    return _bound(x.dtype, S, n, 8)


def _param_sum(t: np.ndarray, pshape: Sequence[int]) -> np.ndarray:
    """Σ over the axes where a parameter of ``pshape`` broadcasts, reshaped to it."""
    lead = t.ndim - len(pshape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(pshape)
                                      if d == 1 and t.shape[lead + i] != 1)
    return t.sum(axis=axes, keepdims=True).reshape(tuple(pshape)) if axes else \
        t.reshape(tuple(pshape))


def backward_bounds(x: np.ndarray, dy: np.ndarray, scale: np.ndarray, axes: Sequence[int],
                    um: bool = True, uv: bool = True, eps: float = 1e-5
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The bounds of the gradient's three results: dX (n, k = 12), dscale (m + n, k = 8),
    dbias (m, k = 0)."""
    z, mu, sigma, n = _stats(x, axes, um, uv, eps)
    s = _param(scale, x, 1.0)
    g = np.abs(dy.astype(np.float64) * s)
    az = 1 + np.abs(z)
    S = (g + _group_mean(g, axes) + az * _group_mean(g * az, axes)) * (1 + mu / sigma) / sigma
    m = x.size // scale.size
    ady = np.abs(dy.astype(np.float64))
    s_scale = _param_sum(ady * az * (1 + mu / sigma), scale.shape)
    s_bias = _param_sum(ady, scale.shape)
    return (_bound(x.dtype, S, n, 12), _bound(x.dtype, s_scale, m + n, 8),
            _bound(x.dtype, s_bias, m, 0))


def assert_within(got: np.ndarray, want: np.ndarray, bound: np.ndarray, what: str = "") -> None:
    """Every element within its bound (NaN only where the reference is NaN)."""
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype)
    assert (np.isnan(got64) == np.isnan(want64)).all(), f"{what}: NaN positions differ"
    err = np.abs(np.where(np.isnan(want64), 0, got64 - want64))
    worst = np.argmax(err - bound)
    assert (err <= bound).all(), (f"{what}: |error| {err.flat[worst]:.3g} > bound "
                                  f"{np.broadcast_to(bound, err.shape).flat[worst]:.3g} at "
                                  f"{np.unravel_index(worst, err.shape)}")
