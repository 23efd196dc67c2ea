"""Slow, obviously-correct oracle for the gradc operators (SPEC.md sections 1-6).

This module is a literal, loop-based transcription of the pseudocode in SPEC.md.  It is written
for clarity, not speed: ``np.ndindex`` loops and NumPy scalars, every float32 step wrapped in
``np.float32``.  Property tests compare the real targets against it.

It imports only ``numpy`` and ``itertools``.

Conventions
-----------
* Tensors (``X``, ``dY``) are NumPy arrays; the result has the dtype the spec gives.
* Array-like arguments (offsets, window sizes, scales, ...) are tuples / lists of Python ints or
  floats (NumPy scalars work too).
* No argument validation is done beyond a few ``assert``s that stop an invalid call from silently
  wrapping a negative index; the oracle is only meant to be called with valid arguments.
* float16 data is widened exactly to float32, computed in float32 and rounded once (SPEC 1.6).
  Ops that only move / select values (relu, clip, slice, max_pooling, nearest resample) copy the
  NumPy scalars unchanged, so -0.0 and NaN payloads are preserved.
"""

import itertools

import numpy as np

__all__ = [
    "ACC",
    "LOWEST",
    "f32",
    "relu",
    "relu_grad",
    "clip",
    "clip_grad",
    "copy_start",
    "slice_",
    "slice_grad",
    "slice_default_output_sizes",
    "pool_size",
    "argmax_window",
    "max_pooling",
    "max_pooling_grad",
    "coord",
    "nearest_index",
    "linear_taps",
    "taps",
    "store",
    "resample_default_output_sizes",
    "resample",
    "resample_grad",
]


# --------------------------------------------------------------------------------------------
# Common definitions (SPEC 1)
# --------------------------------------------------------------------------------------------

def f32(v):
    """``np.float32(v)``: round ``v`` to float32 (round to nearest even)."""
    return np.float32(v)


class _DtypeDict(dict):
    """A dict keyed by ``np.dtype`` that also accepts scalar types / names as keys."""

    def __getitem__(self, key):
        return dict.__getitem__(self, np.dtype(key))

    def __contains__(self, key):
        try:
            return dict.__contains__(self, np.dtype(key))
        except TypeError:
            return False

    def get(self, key, default=None):
        try:
            return self[key]
        except (KeyError, TypeError):
            return default


# Accumulation type of the summing ops (SPEC 1.6). The values are NumPy scalar types, so that
# ``a = ACC[dtype]; a(v)`` converts a value to the accumulation type.
ACC = _DtypeDict({
    np.dtype(np.float16): np.float32,
    np.dtype(np.float32): np.float32,
    np.dtype(np.float64): np.float64,
    np.dtype(np.int8): np.float32,
    np.dtype(np.uint8): np.float32,
})


def LOWEST(dtype):
    """The lowest value of ``dtype``: -inf for floating dtypes, the minimum for integer dtypes."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return dt.type(-np.inf)
    if dt.kind in "iu":
        return dt.type(np.iinfo(dt).min)
    raise TypeError(f"LOWEST: unsupported dtype {dt}")


def _as_tuple(v):
    return tuple(v)


# --------------------------------------------------------------------------------------------
# 2. ReLU
# --------------------------------------------------------------------------------------------

def relu(X):
    X = np.asarray(X)
    Y = np.empty_like(X)
    for i in np.ndindex(*X.shape):
        Y[i] = X[i] if X[i] > 0 else 0      # NaN -> +0, -0.0 -> +0.0
    return Y


def relu_grad(X, dY):
    X = np.asarray(X)
    dY = np.asarray(dY)
    assert X.shape == dY.shape
    dX = np.empty_like(dY)
    for i in np.ndindex(*X.shape):
        dX[i] = dY[i] if X[i] > 0 else 0    # X NaN, +0 or -0 -> +0 (Choice: the zero is +0.0)
    return dX


# --------------------------------------------------------------------------------------------
# 3. Clip
# --------------------------------------------------------------------------------------------

def _bound(v, dtype):
    # The spec says mn / mx are already NumPy scalars of X.dtype; convert plain Python numbers
    # for convenience (the caller is responsible for them being representable).
    if isinstance(v, np.generic) and v.dtype == dtype:
        return v
    return np.dtype(dtype).type(v)


def clip(X, mn, mx):                        # mn, mx already of X.dtype
    X = np.asarray(X)
    mn = _bound(mn, X.dtype)
    mx = _bound(mx, X.dtype)
    Y = np.empty_like(X)
    for i in np.ndindex(*X.shape):
        x = X[i]
        if x != x:                          # NaN
            Y[i] = mx if mn <= mx else mn
        else:
            t = mx if x > mx else x         # min(x, max)
            Y[i] = mn if t < mn else t      # max(min, t)
    return Y


def clip_grad(X, dY, mn, mx):
    X = np.asarray(X)
    dY = np.asarray(dY)
    assert X.shape == dY.shape
    mn = _bound(mn, X.dtype)
    mx = _bound(mx, X.dtype)
    dX = np.empty_like(dY)
    for i in np.ndindex(*X.shape):
        x = X[i]
        dX[i] = 0 if (x <= mn or x >= mx) else dY[i]   # both bounds exclusive; NaN x: dY passes
    return dX


# --------------------------------------------------------------------------------------------
# 4. Slice
# --------------------------------------------------------------------------------------------

def copy_start(off, size, stride):
    return [o + (s - 1 if st < 0 else 0) for o, s, st in zip(off, size, stride)]


def slice_default_output_sizes(size, stride):
    """Default ``output_sizes`` of ``slice`` (1 on an axis whose stride is 0)."""
    return tuple(1 if st == 0 else 1 + (s - 1) // abs(st) for s, st in zip(size, stride))


def slice_(X, off, size, stride, out_sizes=None):
    X = np.asarray(X)
    off, size, stride = _as_tuple(off), _as_tuple(size), _as_tuple(stride)
    if out_sizes is None:
        out_sizes = slice_default_output_sizes(size, stride)
    out_sizes = _as_tuple(out_sizes)
    assert len(off) == len(size) == len(stride) == len(out_sizes) == X.ndim
    s = copy_start(off, size, stride)
    Y = np.empty(out_sizes, X.dtype)
    for c in np.ndindex(*out_sizes):
        src = tuple(s[d] + stride[d] * c[d] for d in range(X.ndim))
        assert all(0 <= src[d] < X.shape[d] for d in range(X.ndim)), "slice: window out of range"
        Y[c] = X[src]
    return Y


def slice_grad(dY, out_sizes, off, size, stride):
    dY = np.asarray(dY)
    out_sizes = _as_tuple(out_sizes)
    off, size, stride = _as_tuple(off), _as_tuple(size), _as_tuple(stride)
    assert len(off) == len(size) == len(stride) == len(out_sizes) == dY.ndim
    assert all(st != 0 for st in stride), "slice_grad: stride 0 is not allowed"
    s = copy_start(off, size, stride)
    dX = np.zeros(out_sizes, dY.dtype)                       # +0 everywhere
    for c in np.ndindex(*dY.shape):
        dst = tuple(s[d] + stride[d] * c[d] for d in range(dY.ndim))
        assert all(0 <= dst[d] < out_sizes[d] for d in range(dY.ndim)), \
            "slice_grad: window out of range"
        dX[dst] = dY[c]                                      # one-to-one: a store, no sum
    return dX


# --------------------------------------------------------------------------------------------
# 5. Max pooling
# --------------------------------------------------------------------------------------------

def pool_size(n, w, s, sp, ep, d):          # floor size, dilation-aware
    return max(1, (n + sp + ep - ((w - 1) * d + 1)) // s + 1)


def _pool_args(X, w, s, sp, ep, d):
    nd = X.ndim - 2
    w = _as_tuple(w)
    s = (1,) * nd if s is None else _as_tuple(s)
    sp = (0,) * nd if sp is None else _as_tuple(sp)
    ep = (0,) * nd if ep is None else _as_tuple(ep)
    d = (1,) * nd if d is None else _as_tuple(d)
    assert X.ndim in (4, 5)
    assert len(w) == len(s) == len(sp) == len(ep) == len(d) == nd
    return w, s, sp, ep, d


def argmax_window(X, n, c, o, w, s, sp, d):
    """flat index of the element the window (n, c, o) selects,
    or None if it holds no input element"""
    S = X.shape[2:]
    best = best_i = None
    for k in np.ndindex(*w):                      # window order = increasing logical index
        p = tuple(o[a] * s[a] - sp[a] + k[a] * d[a] for a in range(len(S)))
        if any(q < 0 or q >= S[a] for a, q in enumerate(p)):
            continue                                          # padding is never a candidate
        v = X[(n, c) + p]
        # strict '>': first maximum wins
        if best is None or (v == v and (best != best or v > best)):
            best, best_i = v, int(np.ravel_multi_index((n, c) + p, X.shape))
    return best_i


def max_pooling(X, w, s=None, sp=None, ep=None, d=None, out_spatial=None):
    """Returns ``(Y, I)``; I holds int64 logical indices over the whole input tensor."""
    X = np.asarray(X)
    w, s, sp, ep, d = _pool_args(X, w, s, sp, ep, d)
    if out_spatial is None:
        out_spatial = tuple(pool_size(X.shape[2 + a], w[a], s[a], sp[a], ep[a], d[a])
                            for a in range(X.ndim - 2))
    out_spatial = _as_tuple(out_spatial)
    assert len(out_spatial) == X.ndim - 2
    Y = np.empty(X.shape[:2] + tuple(out_spatial), X.dtype)
    I = np.zeros(Y.shape, np.int64)
    for n, c, *o in np.ndindex(*Y.shape):
        i = argmax_window(X, n, c, o, w, s, sp, d)
        Y[(n, c, *o)] = X.flat[i] if i is not None else LOWEST(X.dtype)
        I[(n, c, *o)] = i if i is not None else 0
    return Y, I


def max_pooling_grad(X, dY, w, s=None, sp=None, ep=None, d=None):
    X = np.asarray(X)
    dY = np.asarray(dY)
    w, s, sp, ep, d = _pool_args(X, w, s, sp, ep, d)
    assert dY.ndim == X.ndim and dY.shape[:2] == X.shape[:2]
    a = ACC[X.dtype]
    acc = np.zeros(X.size, a)
    with np.errstate(all="ignore"):
        for n, c, *o in np.ndindex(*dY.shape):                # canonical order
            i = argmax_window(X, n, c, o, w, s, sp, d)
            if i is not None:
                acc[i] = a(acc[i] + a(dY[(n, c, *o)]))        # rounded to ACC once per add
        return acc.reshape(X.shape).astype(X.dtype)           # one rounding


# --------------------------------------------------------------------------------------------
# 6. Resample
# --------------------------------------------------------------------------------------------

def coord(o, scale, ipo, opo):
    with np.errstate(all="ignore"):           # t / scale may overflow to +-inf; that is fine
        t = f32(f32(o) - opo)
        t = f32(t / scale)
        return f32(t - ipo)


def nearest_index(x, n, rounding):
    r = np.floor(x) if rounding == "decreasing" else np.ceil(x)
    return int(min(max(r, 0), n - 1))         # clamp before converting: x may be huge


def linear_taps(x, n):
    xc = min(max(x, f32(0)), f32(n - 1))      # Choice: clamp the coordinate, not the indices
    i0 = np.floor(xc)
    f = f32(xc - i0)                          # exact
    i0 = int(i0)
    return [(i0, f32(f32(1) - f)), (min(i0 + 1, n - 1), f)]


def taps(o, n_shape, mode, rounding, S, IPO, OPO):
    """[(index tuple, float32 weight)] in canonical order: axis 0 outermost, low tap first"""
    xs = [coord(o[d], S[d], IPO[d], OPO[d]) for d in range(len(o))]
    if mode == "nearest":
        return [(tuple(nearest_index(xs[d], n_shape[d], rounding) for d in range(len(o))), f32(1))]
    assert mode == "linear", mode
    out = []
    for corner in itertools.product(*(linear_taps(xs[d], n_shape[d]) for d in range(len(o)))):
        w = corner[0][1]
        for _, wd in corner[1:]:
            w = f32(w * wd)                   # product of per-axis weights, left to right
        out.append((tuple(i for i, _ in corner), w))
    return out


def _round_half_away(v):
    """Round a finite float scalar to an integer-valued Python float, halves away from zero
    (C's roundf). Exact: no ``x + 0.5`` trick."""
    v = float(v)
    t = float(np.trunc(v))
    frac = v - t                              # exact (|frac| < 1, same binade or below)
    if frac >= 0.5:
        t += 1.0
    elif frac <= -0.5:
        t -= 1.0
    return t


def store(dtype, acc):
    """Round an accumulated value once to ``dtype`` (SPEC 6.2).

    Floating dtypes: IEEE round to nearest even.  int8 / uint8 (a Choice): round half away from
    zero, then saturate to the dtype's range."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        with np.errstate(all="ignore"):
            return dt.type(acc)
    assert dt in (np.dtype(np.int8), np.dtype(np.uint8)), dt
    assert acc == acc, "store: NaN cannot be stored in an integer dtype"
    info = np.iinfo(dt)
    if acc >= info.max:
        return dt.type(info.max)
    if acc <= info.min:
        return dt.type(info.min)
    r = _round_half_away(acc)
    r = min(max(r, float(info.min)), float(info.max))
    return dt.type(int(r))


def _resample_fields(rank, S, IPO, OPO):
    S = tuple(f32(v) for v in S)
    IPO = (f32(0.5),) * rank if IPO is None else tuple(f32(v) for v in IPO)
    OPO = (f32(-0.5),) * rank if OPO is None else tuple(f32(v) for v in OPO)
    assert len(S) == len(IPO) == len(OPO) == rank
    return S, IPO, OPO


def resample_default_output_sizes(in_shape, S):
    """``floor(f32(f32(in) * scale))`` per axis (SPEC 6: computed in float32)."""
    out = []
    with np.errstate(all="ignore"):
        for n, sc in zip(in_shape, S):
            v = np.floor(f32(f32(n) * f32(sc)))
            out.append(int(v))
    return tuple(out)


def resample(X, out_sizes, mode="nearest", rounding="decreasing", S=None, IPO=None, OPO=None):
    X = np.asarray(X)
    assert S is not None, "resample: scales are required"
    S, IPO, OPO = _resample_fields(X.ndim, S, IPO, OPO)
    if out_sizes is None:
        out_sizes = resample_default_output_sizes(X.shape, S)
    out_sizes = _as_tuple(out_sizes)
    assert len(out_sizes) == X.ndim
    Y = np.empty(out_sizes, X.dtype)
    with np.errstate(all="ignore"):
        if mode == "linear":
            a = ACC[X.dtype]
        for o in np.ndindex(*out_sizes):
            T = taps(o, X.shape, mode, rounding, S, IPO, OPO)
            if mode == "nearest":
                Y[o] = X[T[0][0]]                              # selection: bit-exact
            else:
                acc = a(a(T[0][1]) * a(X[T[0][0]]))            # the sum starts with the first term
                for idx, w in T[1:]:
                    acc = a(acc + a(a(w) * a(X[idx])))
                Y[o] = store(X.dtype, acc)
    return Y


def resample_grad(dY, out_sizes, mode="nearest", rounding="decreasing", S=None, IPO=None,
                  OPO=None):
    dY = np.asarray(dY)
    assert S is not None, "resample_grad: scales are required"
    S, IPO, OPO = _resample_fields(dY.ndim, S, IPO, OPO)
    out_sizes = _as_tuple(out_sizes)
    assert len(out_sizes) == dY.ndim
    a = ACC[dY.dtype]
    acc = np.zeros(out_sizes, a)                        # elements that receive nothing stay +0
    with np.errstate(all="ignore"):
        for y in np.ndindex(*dY.shape):                        # canonical order
            for idx, w in taps(y, out_sizes, mode, rounding, S, IPO, OPO):
                acc[idx] = a(acc[idx] + a(a(w) * a(dY[y])))    # product rounded, then the add
        return acc.astype(dY.dtype)                            # one rounding
