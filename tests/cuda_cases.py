"""Graphs that exercise every kernel family of the cuda target, with inputs that reach their
corners (NaN, -0.0, infinities, ties, padding, clamped borders, overlapping windows).

Shared by ``test_cuda_kernels.py`` (the host harness against the reference, bit for bit),
``test_cuda_nvrtc.py`` (NVRTC compiles every kernel) and ``benchmarks/gpu_smoke.sh`` (the same
cases on the GPU). Each case is ``(graph, feeds)``; the graph's ops have a CUDA lowering.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

import gradc
from gradc import ops

Case = Callable[[], tuple[gradc.Graph, dict[str, np.ndarray]]]
FLOATS = ("float16", "float32", "float64")
RNG_SEED = 2811


def _special(rng: np.random.Generator, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """Random values with a few NaN, -0.0, +-inf and repeated values (ties)."""
    a = rng.standard_normal(shape).astype(dtype)
    flat = a.reshape(-1)
    if flat.size >= 8:
        picks = rng.choice(flat.size, 6, replace=False)
        flat[picks[:4]] = np.array([np.nan, -0.0, np.inf, -np.inf], dtype)
        flat[picks[5]] = flat[picks[4]]
    return a


def _ints(rng: np.random.Generator, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    info = np.iinfo(dtype)
    lo, hi = max(info.min, -100), min(info.max, 100)
    return rng.integers(lo, hi + 1, shape).astype(dtype)


def _graph(name: str, inputs: dict[str, tuple[str, tuple]], fn: Callable[..., dict]
           ) -> gradc.Graph:
    g = gradc.Graph(name)
    vals = {k: g.input(k, d, s) for k, (d, s) in inputs.items()}
    for k, v in fn(**vals).items():
        g.output(v, k)
    return g


def elementwise_chain(dtype: str) -> Case:
    """A fused chain with a broadcast operand, a cast and both seed element-wise gradients."""
    def make() -> tuple[gradc.Graph, dict[str, np.ndarray]]:
        rng = np.random.default_rng(RNG_SEED)
        g = _graph(f"ew_{dtype}", {"x": (dtype, (3, 5, 4)), "b": (dtype, (5, 1)),
                                   "dy": (dtype, (3, 5, 4))},
                   lambda x, b, dy: {
                       "y": ops.clip(ops.add(ops.relu(x), b), -1.0, 1.5),
                       "dx": ops.clip_grad(x, ops.relu_grad(x, ops.mul(ops.neg(dy), b)),
                                           -1.0, 1.5),
                       "c": ops.cast(ops.sub(x, dy), "float16" if dtype != "float16"
                                     else "float32")})
        return g, {"x": _special(rng, dtype, (3, 5, 4)), "b": _special(rng, dtype, (5, 1)),
                   "dy": _special(rng, dtype, (3, 5, 4))}
    return make


def integer_chain(dtype: str) -> Case:
    """Wrapping integer arithmetic, clip and casts."""
    def make() -> tuple[gradc.Graph, dict[str, np.ndarray]]:
        rng = np.random.default_rng(RNG_SEED)
        g = _graph(f"int_{dtype}", {"a": (dtype, (4, 6)), "b": (dtype, (6,))},
                   lambda a, b: {"s": ops.clip(ops.mul(ops.add(a, b), a),
                                               0 if dtype[0] == "u" else -50, 70),
                                 "f": ops.cast(ops.sub(a, b), "float32"),
                                 "w": ops.where(ops.greater(a, b), a, b)})
        return g, {"a": _ints(rng, dtype, (4, 6)), "b": _ints(rng, dtype, (6,))}
    return make


def movements(dtype: str) -> Case:
    """slice (negative and zero strides), transpose, pad, reshape, join, split, expand."""
    def make() -> tuple[gradc.Graph, dict[str, np.ndarray]]:
        rng = np.random.default_rng(RNG_SEED)
        data = _special(rng, dtype, (2, 5, 6)) if dtype in FLOATS else \
            _ints(rng, dtype, (2, 5, 6))

        def fn(x):
            parts = ops.split(x, 2, (1, 3, 2))
            return {"sl": ops.slice(x, (0, 1, 1), (2, 4, 4), (1, -1, 2)),
                    "s0": ops.slice(x, (1, 0, 0), (1, 5, 6), (0, 1, 1), output_sizes=(3, 5, 6)),
                    "tr": ops.transpose(x, (2, 0, 1)),
                    "pd": ops.pad(x, (1, 0, 2), (0, 2, 1), 3),
                    "rs": ops.reshape(ops.neg(x) if dtype in FLOATS else x, (5, 12)),
                    "jn": ops.join([parts[2], x, parts[0]], 2),
                    "p1": parts[1],
                    "ex": ops.expand(ops.slice(x, (0, 0, 0), (1, 1, 6), (1, 1, 1)), x)}
        g = _graph(f"mv_{dtype}", {"x": (dtype, (2, 5, 6))}, fn)
        return g, {"x": data}
    return make


def one_hot(dtype: str) -> Case:
    """Negative and out-of-range indices, on the middle axis."""
    def make() -> tuple[gradc.Graph, dict[str, np.ndarray]]:
        g = _graph(f"oh_{dtype}", {"i": (dtype, (3, 1, 4)), "v": ("float32", (2,))},
                   lambda i, v: {"y": ops.one_hot(i, v, 1, (3, 5, 4))})
        i = np.array([[0, 1, 4, 7], [2, 3, 0, 1], [4, 5, 2, 3]], dtype).reshape(3, 1, 4)
        if np.dtype(dtype).kind == "i":
            i[0, 0, 3], i[1, 0, 2] = -1, -5
        return g, {"i": i, "v": np.array([-0.0, 2.5], np.float32)}
    return make


def slice_grad_fused(dtype: str) -> Case:
    """A strided, reversed window with a prologue and an epilogue; and slice_grad alone,
    into a small and a wide dX."""
    def make() -> tuple[gradc.Graph, dict[str, np.ndarray]]:
        rng = np.random.default_rng(RNG_SEED)

        def fn(y, dy, q):
            d = ops.slice_grad(ops.relu_grad(y, dy), (2, 7, 4), (0, 1, 0), (2, 6, 4), (1, 2, -1))
            return {"dx": ops.clip_grad(q, d, -1.0, 1.0),
                    "alone": ops.slice_grad(dy, (2, 7, 5), (0, 0, 1), (2, 7, 4), (1, 3, 1)),
                    # several blocks of VEC elements per thread, the last one ragged
                    "wide": ops.slice_grad(dy, (3, 37, 29), (1, 2, 10), (2, 33, 12),
                                           (1, 11, 3))}
        g = _graph(f"sg_{dtype}", {"y": (dtype, (2, 3, 4)), "dy": (dtype, (2, 3, 4)),
                                   "q": (dtype, (2, 7, 4))}, fn)
        return g, {k: _special(rng, dtype, s) for k, s in
                   (("y", (2, 3, 4)), ("dy", (2, 3, 4)), ("q", (2, 7, 4)))}
    return make


def pooling(dtype: str, window: tuple[int, ...], strides: tuple[int, ...],
            pads: tuple[int, ...], dilations: tuple[int, ...] | None = None,
            sizes: tuple[int, ...] = (7, 6, 5)) -> Case:
    """max_pooling (values and indices, ceil-mode size) and max_pooling_grad fused with a
    prologue and an epilogue, overlapping windows (or windows that tile the input: ``sizes``
    multiples of the window), ties and NaN."""
    nd = len(window)

    def make() -> tuple[gradc.Graph, dict[str, np.ndarray]]:
        rng = np.random.default_rng(RNG_SEED)
        shape = (2, 3) + sizes[:nd]
        x = _special(rng, dtype, shape) if dtype in FLOATS else _ints(rng, dtype, shape)
        x.reshape(-1)[:8] = x.reshape(-1)[0]  # ties
        kw = dict(strides=strides, start_padding=pads, end_padding=pads, dilations=dilations)
        probe = _graph("p", {"x": (dtype, shape)},
                       lambda x: {"y": ops.max_pooling(x, window, **kw)})
        out = probe.outputs[0].type.shape
        ceil = tuple(int(d) + 1 for d in out[2:])

        def fn(**v):
            r = {"y": ops.max_pooling(v["x"], window, **kw),
                 "yc": ops.max_pooling(v["x"], window, **kw, output_indices=True,
                                       output_sizes=ceil)[0]}
            r["ic"] = ops.max_pooling(v["x"], window, **kw, output_indices=True,
                                      output_sizes=ceil)[1]
            if dtype in FLOATS:
                d = ops.max_pooling_grad(v["x"], ops.relu_grad(v["yin"], v["dy"]), window, **kw)
                r["dx"] = ops.relu_grad(v["q"], d)
                r["alone"] = ops.max_pooling_grad(v["x"], v["dy"], window, **kw)
            return r
        inputs = {"x": (dtype, shape)}
        feeds = {"x": x}
        if dtype in FLOATS:
            inputs |= {"yin": (dtype, out), "dy": (dtype, out), "q": (dtype, shape)}
            feeds |= {"yin": _special(rng, dtype, tuple(out)), "q": _special(rng, dtype, shape),
                      "dy": _special(rng, dtype, tuple(out))}
        return _graph(f"pool_{dtype}_{nd}", inputs, fn), feeds
    return make


def resampling(dtype: str, mode: str, scales: tuple[float, ...]) -> Case:
    """resample and resample_grad (fused with a prologue and an epilogue), clamped borders."""
    def make() -> tuple[gradc.Graph, dict[str, np.ndarray]]:
        rng = np.random.default_rng(RNG_SEED)
        shape = (2, 3, 5, 4)[-len(scales):]
        x = _special(rng, dtype, shape) if dtype in FLOATS else _ints(rng, dtype, shape)
        probe = _graph("p", {"x": (dtype, shape)},
                       lambda x: {"y": ops.resample(x, scales, mode)})
        out = tuple(int(d) for d in probe.outputs[0].type.shape)

        def fn(**v):
            r = {"y": ops.resample(v["x"], scales, mode)}
            if dtype in FLOATS:
                d = ops.resample_grad(ops.relu_grad(v["y2"], v["dy"]), shape, scales, mode)
                r["dx"] = ops.relu_grad(v["q"], d)
            return r
        inputs = {"x": (dtype, shape)}
        feeds = {"x": x}
        if dtype in FLOATS:
            inputs |= {"y2": (dtype, out), "dy": (dtype, out), "q": (dtype, shape)}
            feeds |= {"y2": _special(rng, dtype, out), "dy": _special(rng, dtype, out),
                      "q": _special(rng, dtype, shape)}
        return _graph(f"rs_{dtype}_{mode}", inputs, fn), feeds
    return make


def reductions(dtype: str) -> Case:
    """reduce_sum/mean/max/min (+ gradients), element_count, softmax, log_softmax."""
    def make() -> tuple[gradc.Graph, dict[str, np.ndarray]]:
        rng = np.random.default_rng(RNG_SEED)
        shape = (3, 4, 5)
        x = _special(rng, dtype, shape) if dtype in FLOATS else _ints(rng, dtype, shape)
        x[1, 2, :] = x[1, 2, 0]  # ties

        def fn(**v):
            x = v["x"]
            r = {"s02": ops.reduce_sum(x, (0, 2)), "s1": ops.reduce_sum(x, (1,), True),
                 "sall": ops.reduce_sum(x), "mx": ops.reduce_max(x, (2,)),
                 "mn": ops.reduce_min(x, (0, 1), True),
                 "n": ops.element_count(x, (0, 2), "float16")}
            if dtype in FLOATS:
                r |= {"mean": ops.reduce_mean(x, (1,)),
                      "gmx": ops.reduce_max_grad(x, v["d2"], (2,)),
                      "gmn": ops.reduce_min_grad(x, v["d01"], (0, 1), True),
                      "sm": ops.softmax(x, (2,)), "lsm": ops.log_softmax(x, (0, 1))}
            return r
        inputs = {"x": (dtype, shape)}
        feeds = {"x": x}
        if dtype in FLOATS:
            inputs |= {"d2": (dtype, (3, 4)), "d01": (dtype, (1, 1, 5))}
            feeds |= {"d2": _special(rng, dtype, (3, 4)), "d01": _special(rng, dtype, (1, 1, 5))}
        return _graph(f"red_{dtype}", inputs, fn), feeds
    return make


def softmax_rows(dtype: str) -> Case:
    """softmax/log_softmax of long groups (the cuda target's block-per-group kernel): rows with
    NaN, an all-NaN row, +-inf, tied maxima of -0.0 and +0.0, groups strided in memory, and
    (float64) a group longer than one chunk of shared memory."""
    def make() -> tuple[gradc.Graph, dict[str, np.ndarray]]:
        rng = np.random.default_rng(RNG_SEED)
        cols = 4500 if dtype == "float64" else 300
        x = _special(rng, dtype, (4, cols))
        x[1, :] = np.nan
        x[2, :] = -np.abs(x[2, :])
        x[2, 7], x[2, 100] = -0.0, 0.0  # tied maxima: the first one is selected
        x[3, 5] = np.inf
        x[0, 2::256] = np.nan  # a thread of the block-per-group kernel sees only NaN
        t = _special(rng, dtype, (260, 3))
        return _graph(f"smrows_{dtype}", {"x": (dtype, (4, cols)), "t": (dtype, (260, 3))},
                      lambda x, t: {"smr": ops.softmax(x, (1,)), "lsmr": ops.log_softmax(x, (1,)),
                                    "smc": ops.softmax(t, (0,)),
                                    "lsmc": ops.log_softmax(t, (0,))}), {"x": x, "t": t}
    return make


def batch_norms(dtype: str, shape: tuple[int, ...], pshape: tuple[int, ...]) -> Case:
    """The four batch-normalization ops (§12) on one input: the statistics' sums span several
    staged chunks when a group has more members than ``batch_norm.CHUNK``."""
    def make() -> tuple[gradc.Graph, dict[str, np.ndarray]]:
        rng = np.random.default_rng(RNG_SEED)

        def fn(x, dy, s, b, m, v):
            y, mean, var = ops.batch_normalization_training(x, s, b, 1e-3)
            dx, ds, db = ops.batch_normalization_training_grad(x, dy, mean, var, s, 1e-3)
            gx, gs, gb = ops.batch_normalization_grad(x, dy, m, v, s, 0.5)
            return {"y": y, "mean": mean, "var": var, "dx": dx, "ds": ds, "db": db,
                    "gx": gx, "gs": gs, "gb": gb, "yi": ops.batch_normalization(x, m, v, s, b)}
        inputs = {"x": (dtype, shape), "dy": (dtype, shape), "s": (dtype, pshape),
                  "b": (dtype, pshape), "m": (dtype, pshape), "v": (dtype, pshape)}
        feeds = {k: rng.standard_normal(sh).astype(dtype) for k, (_, sh) in inputs.items()}
        feeds["x"] = (feeds["x"] * 3 + 1).astype(dtype)  # a mean far from 0
        feeds["v"] = np.abs(feeds["v"]).astype(dtype)
        return _graph(f"bn_{dtype}", inputs, fn), feeds
    return make


def average_pools(dtype: str, nd: int) -> Case:
    """average_pooling (padding counted or not, dilation, a ceil-mode size) and its gradient."""
    def make() -> tuple[gradc.Graph, dict[str, np.ndarray]]:
        rng = np.random.default_rng(RNG_SEED)
        shape = (2, 3) + (7, 6, 5)[:nd]
        kw = dict(window_size=(3, 2, 2)[:nd], strides=(2, 1, 2)[:nd],
                  start_padding=(1, 0, 1)[:nd], end_padding=(1, 1, 0)[:nd])
        dil = dict(window_size=(2, 2, 2)[:nd], strides=(1, 2, 1)[:nd],
                   dilations=(2, 1, 2)[:nd])
        probe = _graph("p", {"x": (dtype, shape)},
                       lambda x: {"y": ops.average_pooling(x, **kw)})
        out = tuple(int(d) for d in probe.outputs[0].type.shape)
        ceil = tuple(d + 1 for d in out[2:])

        def fn(x, dy, dc):
            return {"y": ops.average_pooling(x, **kw),
                    "yp": ops.average_pooling(x, **kw, include_padding=True),
                    "yd": ops.average_pooling(x, **dil),
                    "yc": ops.average_pooling(x, **kw, include_padding=True, output_sizes=ceil),
                    "dx": ops.average_pooling_grad(dy, shape, **kw),
                    "dxp": ops.average_pooling_grad(dy, shape, **kw, include_padding=True),
                    "dxc": ops.average_pooling_grad(dc, shape, **kw, include_padding=True)}
        inputs = {"x": (dtype, shape), "dy": (dtype, out), "dc": (dtype, out[:2] + ceil)}
        return _graph(f"ap_{dtype}_{nd}", inputs, fn), {
            "x": _special(rng, dtype, shape), "dy": _special(rng, dtype, out),
            "dc": _special(rng, dtype, out[:2] + ceil)}
    return make


def adam(dtype: str) -> Case:
    """adam_optimizer with each step dtype, at steps where the bias correction matters."""
    def make() -> tuple[gradc.Graph, dict[str, np.ndarray]]:
        rng = np.random.default_rng(RNG_SEED)
        shape = (5, 7)

        def fn(x, m, v, g, t32, t64, tu):
            out = {}
            for name, t, (b1, b2) in (("a", t32, (0.9, 0.999)), ("b", t64, (0.5, 0.75)),
                                      ("c", tu, (0.8, 0.99))):
                r = ops.adam_optimizer(x, m, v, g, t, 0.01, b1, b2, 1e-3)
                out |= {f"{name}x": r[0], f"{name}m": r[1], f"{name}v": r[2]}
            return out
        inputs = {"x": (dtype, shape), "m": (dtype, shape), "v": (dtype, shape),
                  "g": (dtype, shape), "t32": ("int32", (1,)), "t64": ("int64", (1, 1)),
                  "tu": ("uint32", ())}
        feeds = {k: rng.standard_normal(shape).astype(dtype) for k in "xmgv"}
        feeds["v"] = np.abs(feeds["v"]).astype(dtype)
        feeds |= {"t32": np.array([7], np.int32), "t64": np.array([[1]], np.int64),
                  "tu": np.array(1000, np.uint32)}
        return _graph(f"adam_{dtype}", inputs, fn), feeds
    return make


def philox() -> tuple[gradc.Graph, dict[str, np.ndarray]]:
    """random_generator: a count that is no multiple of 4, a counter that carries from its low
    64 bits into its high ones, and one that wraps past 2**128."""
    g = _graph("rng", {"s": ("uint32", (6,)), "w": ("uint32", (6,))},
               lambda s, w: dict(zip(("y", "ys"), ops.random_generator(s, (3, 5, 7))))
               | dict(zip(("z", "zs"), ops.random_generator(w, (2, 1)))))
    carry = np.array([0xFFFFFFF0, 0xFFFFFFFF, 7, 0, 0x12345678, 0x9ABCDEF0], np.uint32)
    wrap = np.array([0xFFFFFFFF] * 4 + [1, 2], np.uint32)
    return g, {"s": carry, "w": wrap}


def gemms(dtype: str) -> Case:
    """gemm: broadcast batch axes with alpha and a broadcast c; both transposes; beta 0 (c not
    read: its NaN does not reach the result); a matrix-vector product (the direct kernel); M, N
    and K prime, so every edge of the tiles is partial; NaN, infinities and -0.0 in the data."""
    def make() -> tuple[gradc.Graph, dict[str, np.ndarray]]:
        rng = np.random.default_rng(RNG_SEED)
        shapes = {"a": (2, 1, 37, 11), "b": (1, 3, 11, 29), "c": (2, 1, 1, 29),
                  "at": (13, 19), "bt": (23, 13), "ct": (19, 23), "v": (13, 1)}

        def fn(a, b, c, at, bt, ct, v):
            return {"mm0": ops.gemm(a, b, c, alpha=0.5, beta=2.0),
                    "mm1": ops.gemm(at, bt, ct, trans_a=True, trans_b=True, beta=-1.5),
                    "mm2": ops.gemm(at, bt, ct, trans_a=True, trans_b=True, alpha=3.0, beta=0.0),
                    "mm3": ops.gemm(bt, v, None)}
        g = _graph(f"gemm_{dtype}", {k: (dtype, s) for k, s in shapes.items()}, fn)
        feeds = {k: _special(rng, dtype, s) for k, s in shapes.items()}
        return g, feeds
    return make


def _mvn_outputs(x, dx3, s, b, q, dq, variants: dict) -> dict:
    """The outputs of a normalization case: ``mvn_ln`` (layer norm of ``x`` with scale ``s``
    and bias ``b``) and ``mvn_<key>`` per variant of ``q`` -- key -> (scale, bias, keyword
    arguments, gradient's scale, gradient's keyword arguments) -- then ``mvn_{dx,ds,db}_<key>``
    of the gradient of each (``ln``'s with ``dx3``, the others' with ``dq``)."""
    mvn, grad = ops.mean_variance_normalization, ops.mean_variance_normalization_grad
    r = {"mvn_ln": mvn(x, s, b)}
    pairs = {"ln": (x, dx3, s, {})}
    for key, (sc, bias, kw, gsc, gkw) in variants.items():
        r[f"mvn_{key}"] = mvn(q, sc, bias, **kw)
        pairs[key] = (q, dq, gsc, gkw)
    for key, (a, d, sc, kw) in pairs.items():
        for name, val in zip(("dx", "ds", "db"), grad(a, d, sc, **kw)):
            r[f"mvn_{name}_{key}"] = val
    return r


def normalization(dtype: str) -> Case:
    """mean_variance_normalization and its gradient (SPEC-transformers §24): layer norm over
    the last axis (300 groups: a partial last block), axes not last with a scale of lower rank,
    RMS norm, without variance, without both, without scale and bias; one group holds NaN,
    infinities and -0.0."""
    def make() -> tuple[gradc.Graph, dict[str, np.ndarray]]:
        rng = np.random.default_rng(RNG_SEED)

        def fn(x, dx3, s, b, w, q, dq, v, u):
            return _mvn_outputs(x, dx3, s, b, q, dq, {
                "axes": (w, None, {"axes": (0, 2)}, w, {"axes": (0, 2)}),
                "rms": (v, v, {"axes": (2,), "use_mean": False, "epsilon": 0.5},
                        v, {"use_mean": False}),
                "mean": (None, None, {"axes": (1, 2), "use_variance": False},
                         u, {"axes": (1, 2), "use_variance": False}),
                "none": (w, None, {"axes": (0,), "use_mean": False, "use_variance": False},
                         w, {"axes": (1,), "use_mean": False, "use_variance": False})})
        shapes = {"x": (300, 3), "dx3": (300, 3), "s": (3,), "b": (3,), "w": (4, 1),
                  "q": (3, 4, 5), "dq": (3, 4, 5), "v": (5,), "u": (1,)}
        g = _graph(f"mvn_{dtype}", {k: (dtype, sh) for k, sh in shapes.items()}, fn)
        feeds = {k: (rng.standard_normal(sh) * 3 + 1).astype(dtype) for k, sh in shapes.items()}
        feeds["x"][7] = np.array([np.nan, 1, 2], dtype)
        feeds["x"][8] = np.array([np.inf, -np.inf, 0], dtype)
        feeds["x"][9] = np.array([-0.0, -0.0, -0.0], dtype)
        feeds["q"][1, 2, 3] = -0.0
        return g, feeds
    return make


def normalization_rows(dtype: str) -> Case:
    """mean_variance_normalization and its gradient over groups of 130..390 members (the cuda
    target's block-per-group kernels): layer norm over the last axis, members strided in memory
    (axes (1,)), two normalized axes with a scale that varies over them, RMS norm, without
    variance, without both; rows with NaN, infinities and -0.0."""
    def make() -> tuple[gradc.Graph, dict[str, np.ndarray]]:
        rng = np.random.default_rng(RNG_SEED)

        def fn(x, dx3, s, b, w, q, dq, u):
            return _mvn_outputs(x, dx3, s, b, q, dq, {
                "axes": (w, None, {"axes": (1, 2)}, w, {"axes": (1, 2)}),
                "rms": (w, w, {"axes": (1,), "use_mean": False, "epsilon": 0.5},
                        w, {"axes": (1,), "use_mean": False}),
                "mean": (None, None, {"axes": (1, 2), "use_variance": False},
                         u, {"axes": (1, 2), "use_variance": False}),
                "none": (w, None, {"axes": (1,), "use_mean": False, "use_variance": False},
                         w, {"axes": (1,), "use_mean": False, "use_variance": False})})
        shapes = {"x": (5, 200), "dx3": (5, 200), "s": (200,), "b": (200,), "w": (130, 1),
                  "q": (2, 130, 3), "dq": (2, 130, 3), "u": (1,)}
        g = _graph(f"mvnrows_{dtype}", {k: (dtype, sh) for k, sh in shapes.items()}, fn)
        feeds = {k: (rng.standard_normal(sh) * 3 + 1).astype(dtype) for k, sh in shapes.items()}
        feeds["x"][1, 7] = np.nan
        feeds["x"][2, :2] = np.array([np.inf, -np.inf], dtype)
        feeds["x"][3] = -0.0
        feeds["q"][1, 2, 0] = -0.0
        return g, feeds
    return make


def convolutions(dtype: str) -> Case:
    """convolution in both directions and convolution_filter_grad: asymmetric padding, strides,
    dilations, groups, the mirrored filter (mode="convolution"), a bias, output_padding, a
    depthwise layer (the direct kernel), a 1x1 layer without padding (no skipped term); NaN
    and infinities in the filters (the masked path: a product with padding is skipped, never
    0 * inf)."""
    def make() -> tuple[gradc.Graph, dict[str, np.ndarray]]:
        rng = np.random.default_rng(RNG_SEED)
        shapes = {"x": (2, 4, 7, 6), "w": (6, 2, 3, 2), "b": (1, 6, 1, 1),
                  "wt": (4, 3, 3, 3), "wd": (4, 1, 3, 3), "w1": (5, 4, 1, 1)}
        fwd = dict(strides=(2, 1), dilations=(1, 2), start_padding=(2, 1), end_padding=(0, 1),
                   group_count=2, mode="convolution")
        bwd = dict(direction="backward", strides=(2, 3), start_padding=(1, 0),
                   end_padding=(0, 1), output_padding=(1, 2))
        dep = dict(start_padding=(1, 1), end_padding=(1, 1), group_count=4)

        def fn(x, w, b, wt, wd, w1, dy, dyt, dyd):
            return {"cv0": ops.convolution(x, w, b, **fwd),
                    "cv1": ops.convolution(x, wt, None, **bwd),
                    "cv2": ops.convolution(x, wd, None, **dep),
                    "cv3": ops.convolution(x, w1, None),
                    "fg0": ops.convolution_filter_grad(x, dy, (6, 2, 3, 2), **fwd),
                    "fg1": ops.convolution_filter_grad(x, dyt, (4, 3, 3, 3), **bwd),
                    "fg2": ops.convolution_filter_grad(x, dyd, (4, 1, 3, 3), **dep)}
        probe = _graph("p", {k: (dtype, s) for k, s in shapes.items()},
                       lambda x, w, b, wt, wd, w1: {
                           "a": ops.convolution(x, w, b, **fwd),
                           "t": ops.convolution(x, wt, None, **bwd),
                           "d": ops.convolution(x, wd, None, **dep)})
        for k, v in zip(("dy", "dyt", "dyd"), probe.outputs):
            shapes[k] = tuple(int(d) for d in v.type.shape)
        g = _graph(f"conv_{dtype}", {k: (dtype, s) for k, s in shapes.items()}, fn)
        return g, {k: _special(rng, dtype, s) for k, s in shapes.items()}
    return make


def convolution_relu(dtype: str) -> Case:
    """A relu of forward convolutions (with a bias, padded; and a 1x1 without): the cuda
    target runs it as the convolution's epilogue (``plan.relu_epilogues``); NaN, -0.0 and
    negative sums select +0 as the relu kernel does."""
    def make() -> tuple[gradc.Graph, dict[str, np.ndarray]]:
        rng = np.random.default_rng(RNG_SEED)
        shapes = {"x": (2, 3, 6, 5), "w": (4, 3, 3, 3), "b": (1, 4, 1, 1), "w1": (5, 3, 1, 1)}

        def fn(x, w, b, w1):
            return {"cr": ops.relu(ops.convolution(x, w, b, start_padding=(1, 1),
                                                   end_padding=(1, 1))),
                    "cr1": ops.relu(ops.convolution(x, w1, None))}
        g = _graph(f"conv_relu_{dtype}", {k: (dtype, s) for k, s in shapes.items()}, fn)
        feeds = {k: _special(rng, dtype, s) for k, s in shapes.items()}
        feeds["b"][0, 1, 0, 0] = -0.0
        return g, feeds
    return make


def convolutions_nd(nd: int) -> Case:
    """1-d and 3-d convolutions (float32), forward with padding, backward with dilation, and
    their filter gradients."""
    def make() -> tuple[gradc.Graph, dict[str, np.ndarray]]:
        rng = np.random.default_rng(RNG_SEED)
        sp = (5, 4, 3)[:nd] if nd == 3 else (9,)
        x_s, w_s = (2, 3) + sp, (4, 3) + (2,) * nd
        one = (1,) * nd
        fwd = dict(start_padding=one, end_padding=(0,) * nd, strides=(2,) * nd)
        bwd = dict(direction="backward", dilations=(2,) * nd, start_padding=one,
                   end_padding=one)
        probe = _graph("p", {"x": ("float32", x_s), "w": ("float32", w_s),
                             "wt": ("float32", (3, 4) + (2,) * nd)},
                       lambda x, w, wt: {"a": ops.convolution(x, w, **fwd),
                                         "t": ops.convolution(x, wt, **bwd)})
        dy_s, dyt_s = (tuple(int(d) for d in v.type.shape) for v in probe.outputs)

        def fn(x, w, wt, dy, dyt):
            return {"cv0": ops.convolution(x, w, **fwd), "cv1": ops.convolution(x, wt, **bwd),
                    "fg0": ops.convolution_filter_grad(x, dy, w_s, **fwd),
                    "fg1": ops.convolution_filter_grad(x, dyt, (3, 4) + (2,) * nd, **bwd)}
        shapes = {"x": x_s, "w": w_s, "wt": (3, 4) + (2,) * nd, "dy": dy_s, "dyt": dyt_s}
        g = _graph(f"conv{nd}d", {k: ("float32", s) for k, s in shapes.items()}, fn)
        return g, {k: _special(rng, "float32", s) for k, s in shapes.items()}
    return make


def gathers(dtype: str, index: str) -> Case:
    """gather (every dtype: bit patterns copied) along a middle axis with negative, repeated
    and rank-0 indices; for floats gather_grad in order of occurrence -- a few indices (each
    output thread scans them) and 300 (sorted first: runs and a merge level) with repeats."""
    def make() -> tuple[gradc.Graph, dict[str, np.ndarray]]:
        rng = np.random.default_rng(RNG_SEED)
        x = _special(rng, dtype, (2, 5, 3)) if dtype in FLOATS else \
            rng.integers(0, 2, (2, 5, 3)).astype(dtype) if dtype == "bool" else \
            _ints(rng, dtype, (2, 5, 3))
        inputs = {"x": (dtype, (2, 5, 3)), "i": (index, (2, 3)), "i0": (index, ()),
                  "big": (index, (20, 15))}
        feeds = {"x": x, "i": np.array([[4, -1, 0], [-5, 2, 4]], index),
                 "i0": np.array(-2, index), "big": rng.integers(-7, 7, (20, 15)).astype(index)}

        def fn(x, i, i0, big, **d):
            r = {"ga": ops.gather(x, i, axis=1), "ga0": ops.gather(x, i0, axis=2),
                 "ga_last": ops.gather(x, i0, axis=0)}
            if dtype in FLOATS:
                r |= {"gg": ops.gather_grad(d["dy"], i, (2, 5, 3), axis=1),
                      "gg0": ops.gather_grad(d["dy0"], i0, (2, 5, 3), axis=2),
                      "gg_big": ops.gather_grad(d["dbig"], big, (7, 2), axis=0)}
            return r
        if dtype in FLOATS:
            inputs |= {"dy": (dtype, (2, 2, 3, 3)), "dy0": (dtype, (2, 5)),
                       "dbig": (dtype, (20, 15, 2))}
            feeds |= {"dy": _special(rng, dtype, (2, 2, 3, 3)),
                      "dy0": _special(rng, dtype, (2, 5)),
                      "dbig": (rng.standard_normal((20, 15, 2)) * 100).astype(dtype)}
            feeds["dbig"][3, 4] = [-0.0, -0.0]
        return _graph(f"ga_{dtype}_{index}", inputs, fn), feeds
    return make


def activations(dtype: str) -> Case:
    """gelu (both forms) and gelu_grad, erf, sin, cos, is_nan (SPEC-transformers §25) on
    special values: +-inf, NaN, -0.0, huge and tiny magnitudes."""
    def make() -> tuple[gradc.Graph, dict[str, np.ndarray]]:
        rng = np.random.default_rng(RNG_SEED)
        special = [np.inf, -np.inf, np.nan, -0.0, 0.0, 1e-30, -1e-30, 3e38, -3e38, 1e20, -1e20,
                   -6.5, -3.0, -1.0, -0.5, 0.5, 1.0, 3.0, 7.0, 65504.0, -65504.0]
        with np.errstate(over="ignore"):
            x = np.concatenate([np.array(special, np.float64).astype(dtype),
                                (rng.standard_normal(43) * 4).astype(dtype)])
        dy = rng.standard_normal(x.size).astype(dtype)
        dy[:4] = np.array([1, -0.0, 2, np.inf], dtype)

        def fn(x, dy):
            return {"gelu": ops.gelu(x), "gelu_t": ops.gelu(x, "tanh"),
                    "gelu_grad": ops.gelu_grad(x, dy), "gelu_grad_t": ops.gelu_grad(x, dy, "tanh"),
                    "erf": ops.erf(x), "sin": ops.sin(x), "cos": ops.cos(x),
                    "isnan": ops.is_nan(x)}
        g = _graph(f"act_{dtype}", {"x": (dtype, (x.size,)), "dy": (dtype, (x.size,))}, fn)
        return g, {"x": x, "dy": dy}
    return make


def tiny_cnn() -> gradc.Graph:
    """A model whose training step uses only ops of the cuda target (no gemm): a per-channel
    scale and bias, relu, max pooling, a mean, class scores by broadcasting, cross entropy."""
    rng = np.random.default_rng(5)
    g = gradc.Graph("tiny")
    x = g.input("x", "float32", (4, 3, 6, 6))
    w = g.add_parameter("w", rng.standard_normal((1, 3, 1, 1)).astype(np.float32))
    b = g.add_parameter("b", rng.standard_normal((1, 3, 1, 1)).astype(np.float32))
    k = g.add_parameter("k", rng.standard_normal((5, 3)).astype(np.float32))
    with g:
        h = ops.max_pooling(ops.relu(ops.add(ops.mul(x, w), b)), (2, 2), (2, 2))
        f = ops.reshape(ops.reduce_mean(h, (2, 3)), (4, 1, 3))
        g.output(ops.reduce_sum(ops.mul(f, k), (2,)), "y")
    return g


CASES: dict[str, Case] = {}
for _d in FLOATS:
    CASES[f"elementwise_{_d}"] = elementwise_chain(_d)
    CASES[f"movements_{_d}"] = movements(_d)
    CASES[f"slice_grad_{_d}"] = slice_grad_fused(_d)
    CASES[f"pool2d_{_d}"] = pooling(_d, (3, 3), (2, 2), (1, 1))
    CASES[f"resample_linear_{_d}"] = resampling(_d, "linear", (1, 1, 2.0, 1.5))
    CASES[f"resample_nearest_{_d}"] = resampling(_d, "nearest", (1, 1, 0.5, 2.5))
    # integer scales: every axis of the gradient regular (no tables)
    CASES[f"resample_nearest_x2_{_d}"] = resampling(_d, "nearest", (1, 1, 2.0, 3.0))
    # a 2x linear upsampling's gradient (a UNet's): every group and tap written out, guards
    # on the groups and taps that the borders lack (resample.py's _emit_padded)
    CASES[f"resample_linear_x2_{_d}"] = resampling(_d, "linear", (1, 1, 2.0, 2.0))
    CASES[f"reductions_{_d}"] = reductions(_d)
    CASES[f"softmax_rows_{_d}"] = softmax_rows(_d)
    CASES[f"gemm_{_d}"] = gemms(_d)
    CASES[f"convolution_{_d}"] = convolutions(_d)
CASES["convolution_relu_float32"] = convolution_relu("float32")
CASES["convolution_relu_float64"] = convolution_relu("float64")
CASES["convolution_1d_float32"] = convolutions_nd(1)
CASES["convolution_3d_float32"] = convolutions_nd(3)
for _d in ("int8", "uint16", "int32", "uint64", "int64"):
    CASES[f"integers_{_d}"] = integer_chain(_d)
CASES["movements_int8"] = movements("int8")
CASES["movements_uint64"] = movements("uint64")
CASES["one_hot_int64"] = one_hot("int64")
CASES["one_hot_uint32"] = one_hot("uint32")
CASES["pool2d_dilated_float32"] = pooling("float32", (2, 3), (1, 2), (1, 0), (2, 1))
CASES["pool3d_float32"] = pooling("float32", (2, 2, 2), (2, 2, 2), (0, 0, 0))
CASES["pool2d_int16"] = pooling("int16", (2, 2), (2, 1), (0, 1))
for _d in FLOATS:  # windows that tile the input: the gradient's thread-per-window form
    CASES[f"pool2d_tiling_{_d}"] = pooling(_d, (2, 2), (2, 2), (0, 0), sizes=(6, 8))
CASES["pool3d_tiling_float32"] = pooling("float32", (2, 3, 2), (2, 3, 2), (0, 0, 0),
                                         sizes=(4, 6, 4))
CASES["resample_linear_uint8"] = resampling("uint8", "linear", (1, 1, 1.5, 0.75))
CASES["resample_nearest_int8"] = resampling("int8", "nearest", (1, 1, 2.0, 2.0))
CASES["resample_rank1_float32"] = resampling("float32", "linear", (1.75,))
for _d in FLOATS:
    CASES[f"normalization_{_d}"] = normalization(_d)
    CASES[f"normalization_rows_{_d}"] = normalization_rows(_d)
    CASES[f"activations_{_d}"] = activations(_d)
    CASES[f"gathers_{_d}_int64"] = gathers(_d, "int64")
CASES["gathers_float32_int32"] = gathers("float32", "int32")
CASES["gathers_int8_int32"] = gathers("int8", "int32")
CASES["gathers_uint64_int64"] = gathers("uint64", "int64")
CASES["gathers_bool_int64"] = gathers("bool", "int64")
CASES["reductions_int32"] = reductions("int32")
CASES["reductions_uint8"] = reductions("uint8")
for _d in FLOATS:
    CASES[f"batch_norm_{_d}"] = batch_norms(_d, (3, 4, 5, 6), (1, 4, 1, 1))
    CASES[f"average_pool2d_{_d}"] = average_pools(_d, 2)
    CASES[f"adam_{_d}"] = adam(_d)
CASES["batch_norm_chunks_float32"] = batch_norms("float32", (2, 3, 40, 30), (1, 3, 1, 1))
CASES["batch_norm_kept_axes_float32"] = batch_norms("float32", (3, 4, 5, 2), (1, 4, 1, 2))
CASES["average_pool3d_float32"] = average_pools("float32", 3)
CASES["philox"] = philox

# Outputs computed by a sum of NaN-producing terms: a NaN must match a NaN, its payload is not
# specified (SPEC.md §1.6).
SUMMED = {"dx", "alone", "s02", "s1", "sall", "mean", "y", "yc", "mm0", "mm1", "mm2", "mm3",
          "cv0", "cv1", "cv2", "cv3", "fg0", "fg1", "fg2", "cr", "cr1", "gg", "gg0", "gg_big",
          "var", "ds", "db", "gx", "gs", "gb", "yi", "yp", "yd", "dxp", "dxc"} | {
    f"mvn_{o}{k}" for o in ("", "dx_", "ds_", "db_") for k in ("ln", "axes", "rms", "mean",
                                                              "none")}
# Outputs of transcendental functions: within SPEC-training §9.5's ulps of the reference (libm's
# and the GPU's double exp/log may differ from NumPy's by an ulp before rounding to the dtype);
# adam_optimizer's parameters too: its bias correction's powers are the correctly rounded ones on
# the cuda target, the reference's NumPy power is not always (tests/test_cuda_training.py).
TRANSCENDENTAL = {"sm", "lsm", "smr", "lsmr", "smc", "lsmc", "erf", "sin", "cos", "ax", "bx", "cx"}
# gelu and gelu_grad: SPEC-transformers §25.4's ulps plus an absolute term in the input ``x``
# (times ``|dy|`` for the gradient): output -> the feeds holding x and dy.
GELU = {"gelu": ("x", None), "gelu_t": ("x", None), "gelu_grad": ("x", "dy"),
        "gelu_grad_t": ("x", "dy")}


def gelu_bound(want: np.ndarray, x: np.ndarray, dy: np.ndarray | None) -> np.ndarray:
    """§25.4's allowed error of gelu (or, with ``dy``, gelu_grad) per element, as float64."""
    k = 1 if want.dtype == np.float16 else 4
    eps = 2.0 ** -52 if want.dtype == np.float64 else 2.0 ** -23
    with np.errstate(over="ignore", invalid="ignore"):
        tol = k * np.spacing(np.abs(want)).astype(np.float64)
        term = 4 * eps * (1 + np.abs(x.astype(np.float64)))
        if dy is not None:
            term = term * np.abs(dy.astype(np.float64))
    return tol + term
