"""SPEC-training.md §10's pseudocode, loop by loop: the slow oracle of the convolution tests."""

from __future__ import annotations

import numpy as np

ACC = {np.dtype(np.float16): np.float32, np.dtype(np.float32): np.float32,
       np.dtype(np.float64): np.float64}


def conv_out_size(n, k, s, d, sp, ep, op, direction):
    ext = (k - 1) * d + 1
    if direction == "forward":
        return (n + sp + ep - ext) // s + 1
    return (n - 1) * s + ext - sp - ep + op


def convolution(X, W, B, mode, direction, s, d, sp, ep, op, g):
    """§10.1's pseudocode, as written."""
    nd, a = X.ndim - 2, ACC[X.dtype]
    if mode == "convolution":
        W = W[(slice(None), slice(None)) + (slice(None, None, -1),) * nd]
    K, Si = W.shape[2:], X.shape[2:]
    if direction == "forward":
        Co, cig, cog = W.shape[0], X.shape[1] // g, W.shape[0] // g
    else:
        Co, cig, cog = W.shape[1] * g, X.shape[1] // g, W.shape[1]
    out = [conv_out_size(Si[i], K[i], s[i], d[i], sp[i], ep[i], op[i], direction)
           for i in range(nd)]
    Y = np.empty((X.shape[0], Co, *out), X.dtype)
    with np.errstate(all="ignore"):
        for n, co, *o in np.ndindex(*Y.shape):
            grp, col = divmod(co, cog)
            acc = a(0)
            for ci in range(grp * cig, (grp + 1) * cig):
                if direction == "forward":
                    for k in np.ndindex(*K):
                        p = tuple(o[i] * s[i] - sp[i] + k[i] * d[i] for i in range(nd))
                        if all(0 <= p[i] < Si[i] for i in range(nd)):
                            acc = a(acc + a(X[(n, ci) + p]) * a(W[(co, ci - grp * cig) + k]))
                else:
                    for i_ in np.ndindex(*Si):
                        q = [o[i] + sp[i] - i_[i] * s[i] for i in range(nd)]
                        if all(q[i] % d[i] == 0 and 0 <= q[i] // d[i] < K[i]
                               for i in range(nd)):
                            k = tuple(q[i] // d[i] for i in range(nd))
                            acc = a(acc + a(X[(n, ci) + i_]) * a(W[(ci, col) + k]))
            if B is not None:
                acc = a(acc + a(B[(0, co) + (0,) * nd]))
            Y[(n, co, *o)] = acc
    return Y


def convolution_filter_grad(X, dY, out_sizes, mode, direction, s, d, sp, ep, op, g):
    """§10.2's pseudocode, as written."""
    nd, a, K = X.ndim - 2, ACC[X.dtype], tuple(out_sizes[2:])
    if direction == "forward":
        cig, cog = X.shape[1] // g, out_sizes[0] // g
    else:
        cig, cog = out_sizes[0] // g, out_sizes[1]
    dW = np.empty(out_sizes, X.dtype)
    with np.errstate(all="ignore"):
        for f0, f1, *k in np.ndindex(*out_sizes):
            kk = [k[i] if mode == "cross_correlation" else K[i] - 1 - k[i] for i in range(nd)]
            acc = a(0)
            if direction == "forward":
                ci = (f0 // cog) * cig + f1
                for n in range(X.shape[0]):
                    for o in np.ndindex(*dY.shape[2:]):
                        p = tuple(o[i] * s[i] - sp[i] + kk[i] * d[i] for i in range(nd))
                        if all(0 <= p[i] < X.shape[2 + i] for i in range(nd)):
                            acc = a(acc + a(dY[(n, f0) + o]) * a(X[(n, ci) + p]))
            else:
                co = (f0 // cig) * cog + f1
                for n in range(X.shape[0]):
                    for i_ in np.ndindex(*X.shape[2:]):
                        p = tuple(i_[i] * s[i] - sp[i] + kk[i] * d[i] for i in range(nd))
                        if all(0 <= p[i] < dY.shape[2 + i] for i in range(nd)):
                            acc = a(acc + a(X[(n, f0) + i_]) * a(dY[(n, co) + p]))
            dW[(f0, f1, *k)] = acc
    return dW
