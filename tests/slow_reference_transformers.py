"""Slow, obviously-correct oracle for SPEC-transformers.md §24 and §26 (normalization, gather).

A literal, loop-based transcription of the sections' pseudocode, in the style of
``slow_reference.py``: ``np.ndindex`` loops over NumPy scalars, every step wrapped in the
accumulation type ``a`` (float32 for float16 and float32, float64 for float64), sums from +0 in
the canonical order. Property tests compare the targets against it. It imports only NumPy.
"""

import numpy as np

ACC = {np.dtype(np.float16): np.float32, np.dtype(np.float32): np.float32,
       np.dtype(np.float64): np.float64}


def groups(shape, axes):
    """(base, members) per group: the positions sharing their coordinates off ``axes``,
    members in increasing logical index (§12.2's ``groups``)."""
    kept = [i for i in range(len(shape)) if i not in axes]
    for k in np.ndindex(*[shape[i] for i in kept]):
        members = []
        for j in np.ndindex(*[shape[i] for i in axes]):
            full = [0] * len(shape)
            for i, v in zip(kept, k):
                full[i] = v
            for i, v in zip(axes, j):
                full[i] = v
            members.append(tuple(full))
        yield k, members


def canonical_sum(values, a):
    """From +0, in order, each addition rounded in ``a``."""
    s = a(0)
    for v in values:
        s = a(s + v)
    return s


def bcast(p, m):
    """The index of ``p`` broadcast to an element ``m`` of the input (right-aligned)."""
    lead = len(m) - p.ndim
    return tuple(0 if p.shape[i] == 1 else m[lead + i] for i in range(p.ndim))


def mvn_stats(X, members, a, use_mean, use_variance, eps):
    """§24.1's ``mvn_stats``: the normalized values of one group and ``inv``."""
    n = a(len(members))
    x = [a(X[m]) for m in members]
    if use_mean:
        mean = a(canonical_sum(x, a) / n)
        d = [a(v - mean) for v in x]
    else:
        d = x
    if not use_variance:
        return d, None
    var = a(canonical_sum([a(v * v) for v in d], a) / n)
    inv = a(a(1) / a(np.sqrt(a(var + a(eps)))))
    return [a(v * inv) for v in d], inv


def mean_variance_normalization(X, scale, bias, axes, use_mean, use_variance, eps):
    """§24.1."""
    a = ACC[X.dtype]
    Y = np.empty(X.shape, X.dtype)
    with np.errstate(all="ignore"):
        for _, members in groups(X.shape, axes):
            z, _ = mvn_stats(X, members, a, use_mean, use_variance, eps)
            for m, y in zip(members, z):
                if scale is not None:
                    y = a(y * a(scale[bcast(scale, m)]))
                if bias is not None:
                    y = a(y + a(bias[bcast(bias, m)]))
                Y[m] = y
    return Y


def mean_variance_normalization_grad(X, dY, scale, axes, use_mean, use_variance, eps):
    """§24.2: (dX, dscale, dbias)."""
    a = ACC[X.dtype]
    dX, Z = np.empty(X.shape, X.dtype), {}
    with np.errstate(all="ignore"):
        for _, members in groups(X.shape, axes):
            n = a(len(members))
            z, inv = mvn_stats(X, members, a, use_mean, use_variance, eps)
            g = [a(a(dY[m]) * a(scale[bcast(scale, m)])) for m in members]
            if use_mean:
                mg = a(canonical_sum(g, a) / n)
            if use_variance:
                mgz = a(canonical_sum([a(gi * zi) for gi, zi in zip(g, z)], a) / n)
            for m, gi, zi in zip(members, g, z):
                r = gi
                if use_mean:
                    r = a(r - mg)
                if use_variance:
                    r = a(inv * a(r - a(zi * mgz)))
                dX[m], Z[m] = r, zi
        dS = np.zeros(scale.shape, a)
        dB = np.zeros(scale.shape, a)
        for m in np.ndindex(*X.shape):
            p = bcast(scale, m)
            dS[p] = a(dS[p] + a(a(dY[m]) * Z[m]))
            dB[p] = a(dB[p] + a(dY[m]))
    return dX, dS.astype(X.dtype), dB.astype(X.dtype)


def check_indices(op, I, size):
    """§26.3: the first index outside [-size, size) in row-major order, or None."""
    for j in np.ndindex(*I.shape):
        k = int(I[j])
        if k < -size or k >= size:
            return op, j, k
    return None


def gather(X, I, axis):
    """§26.1 (indices already checked)."""
    size, q = X.shape[axis], I.ndim
    Y = np.empty(X.shape[:axis] + I.shape + X.shape[axis + 1:], X.dtype)
    for o in np.ndindex(*Y.shape):
        k = int(I[o[axis:axis + q]])
        Y[o] = X[o[:axis] + (k + size if k < 0 else k,) + o[axis + q:]]
    return Y


def gather_grad(dY, I, out_sizes, axis):
    """§26.2 (indices already checked)."""
    size, a = out_sizes[axis], ACC[dY.dtype]
    acc = np.zeros(out_sizes, a)
    pre, post = out_sizes[:axis], out_sizes[axis + 1:]
    for j in np.ndindex(*I.shape):
        k = int(I[j])
        k = k + size if k < 0 else k
        for p in np.ndindex(*pre):
            for s in np.ndindex(*post):
                acc[p + (k,) + s] = a(acc[p + (k,) + s] + a(dY[p + j + s]))
    return acc.astype(dY.dtype)
