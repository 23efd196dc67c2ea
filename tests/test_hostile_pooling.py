"""Hostile pooling graphs: huge windows, strides, paddings, dilations and tensors.

Every public entry point either succeeds or raises a GradcError; compile-time work and memory
are bounded by the graph's size, never by its tensors' sizes or attribute magnitudes; where the
graphs run, every target matches the reference bit for bit (SPEC.md §5). The cases that once
hung or exhausted memory run in a child process under ``RLIMIT_AS`` (2 GiB) and a timeout, so a
regression fails its test instead of taking the machine down. Failure classes: C2 (C emitter
loops over output columns), C3 (ONNX index tables as large as the output), C4 (every window
position visited), C5 (C scratch sized by the stride), D7 (ONNX attributes past int64), D8
(ONNX attributes used before they are checked), and RuntimeWarnings escaping.
"""

from __future__ import annotations

import re
import resource
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import gradc
from gradc import ops
from gradc.backends.c.emit import generate

LIMIT_AS = 2 << 30  # bytes of address space a child may map
BIG = (2 ** 31, 2 ** 32, 2 ** 40, 2 ** 62, 2 ** 63 - 1)

C2_TEXT = """graph g(%x: f32[1,1,4,1099511627776], %dy: f32[1,1,2,1099511627774]) {
  %dx = max_pooling_grad(%x, %dy) {window_size = [3, 3]} : f32[1,1,4,1099511627776]
  return %dx
}"""
C4_TEXT = """graph g(%x: f32[1,1,8,8]) {
  %y = max_pooling(%x) {window_size = [1099511627776, 2], output_sizes = [1, 4]} : f32[1,1,1,4]
  return %y
}"""

# The child's prelude: the limits, warnings as errors, and the helpers the snippets use.
PRELUDE = '''
import resource, sys, time, tracemalloc, warnings
import numpy as np
import gradc
from gradc import ops
from gradc.backends.c.emit import generate
warnings.simplefilter("error")  # a RuntimeWarning from pooling code fails the child

def timed(what, fn, seconds=1.0, mib=100):
    """fn() must finish within ``seconds`` and trace at most ``mib`` MiB of Python memory."""
    tracemalloc.start()
    t = time.perf_counter()
    try:
        r = fn()
    finally:
        dt = time.perf_counter() - t
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert dt < seconds, f"{what}: {dt:.2f} s"
    assert peak < mib * 2 ** 20, f"{what}: {peak / 2 ** 20:.0f} MiB"
    return r

def stages(g, targets, seconds=1.0):
    """parse(str), optimize, to_onnx and compile on every target, each bounded."""
    text = str(g)
    g = timed("parse", lambda: gradc.parse(text), seconds)
    timed("optimize", lambda: gradc.optimize(g), seconds)
    timed("to_onnx", lambda: gradc.to_onnx(g), seconds)
    timed("c source", lambda: generate(gradc.optimize(g).graph), seconds)
    return {t: timed(f"compile {t}", lambda: gradc.compile(g, target=t), 20 * seconds)
            for t in targets}

def data(rng, v):
    dt = v.type.dtype.numpy
    a = rng.integers(-3, 4, v.type.shape).astype(dt)  # ties; sums of small ints are exact
    if dt.kind == "f":
        a.flat[rng.integers(0, a.size, 2)] = np.nan
    return a

def same_bits(exes, rng, reps=2):
    ref = exes["reference"]
    for _ in range(reps):
        args = {v.name: data(rng, v) for v in ref.graph.inputs}
        want = ref(**args)
        for t, ex in exes.items():
            got = ex(**args)
            for k in want:
                assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, (t, k)
                assert got[k].tobytes() == want[k].tobytes(), (t, k, got[k], want[k])
'''


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_AS, LIMIT_AS))


def run_child(code: str, timeout: float = 60) -> str:
    """Run ``PRELUDE + code`` in a fresh interpreter under RLIMIT_AS; return its stdout."""
    src = PRELUDE + textwrap.dedent(code)
    try:
        r = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True,
                           timeout=timeout, preexec_fn=_limit)
    except subprocess.TimeoutExpired:
        pytest.fail(f"child timed out after {timeout} s")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


# -- C2, C3: tensors of 2**40 elements compile in bounded time and memory ----------------------

def test_huge_tensors_compile_without_size_driven_work():
    """C2: the C emitter writes loops (milliseconds), not a run per output column. C3: the
    ONNX export of pooling and its gradient builds no table the size of the output."""
    run_child('''
        g = gradc.parse(%r)
        src = timed("C2 c source", lambda: generate(gradc.optimize(g).graph), 0.5)
        assert len(src.source) < 200_000
        timed("C2 compile c", lambda: gradc.compile(g, target="c"), 30)
        n = 2 ** 40
        for w, s, p in [((3, 3), (1, 1), (0, 0)), ((2, 2), (2, 2), (0, 0)),
                        ((3, 3), (1, 1), (1, 1)), ((2, 2, 2), (1, 1, 1), (0, 0, 0))]:
            shape = (1, 1, 4, n) if len(w) == 2 else (1, 1, 2, 3, n)
            g = gradc.Graph("huge")
            x = g.input("x", "float32", shape)
            y, i = ops.max_pooling(x, w, s, p, p, output_indices=True)
            dy = g.input("dy", "float32", y.type.shape)
            g.output(y, "y"), g.output(i, "i")
            g.output(ops.max_pooling_grad(x, dy, w, s, p, p), "dx")
            exes = stages(g, ["reference", "numpy"])
            model = timed("to_onnx", lambda: gradc.to_onnx(g))
            assert model.ByteSize() < 1_000_000, model.ByteSize()
    ''' % C2_TEXT)


def test_onnx_refuses_too_many_taps_by_name():
    """C3: a window with more taps inside the input than the exporter's budget is refused with
    an UnsupportedError naming the op and the field, in bounded time."""
    run_child('''
        from gradc.backends.onnx.lower_pooling import MAX_TAPS
        g = gradc.Graph("wide")
        x = g.input("x", "float32", (1, 1, 1, 4 * MAX_TAPS))
        g.output(ops.max_pooling(x, (1, 2 * MAX_TAPS)), "y")
        try:
            timed("to_onnx", lambda: gradc.to_onnx(g))
        except gradc.UnsupportedError as e:
            assert "max_pooling" in str(e) and "window_size" in str(e), e
        else:
            raise AssertionError("expected UnsupportedError")
    ''')


def test_real_models_still_export_exactly():
    """C3: 112x112 inputs, 3x3 windows, stride 2, padding 1, symbolic batch: exported and
    bit-exact (values, indices, gradient); large global windows export too."""
    g = gradc.Graph("real")
    x = g.input("x", "float32", ("N", 3, 112, 112))
    dy = g.input("dy", "float32", ("N", 3, 56, 56))
    y, i = ops.max_pooling(x, (3, 3), (2, 2), (1, 1), (1, 1), output_indices=True)
    g.output(y, "y"), g.output(i, "i")
    g.output(ops.max_pooling_grad(x, dy, (3, 3), (2, 2), (1, 1), (1, 1)), "dx")
    g.output(ops.max_pooling(x, (112, 112)), "z")
    model = gradc.to_onnx(g)
    onnx.checker.check_model(model, full_check=True)
    assert model.ByteSize() < 2_000_000
    rng = np.random.default_rng(0)
    args = {"x": rng.integers(-4, 5, (2, 3, 112, 112)).astype(np.float32),
            "dy": rng.integers(-4, 5, (2, 3, 56, 56)).astype(np.float32)}
    want = gradc.compile(g, target="reference")(**args)
    got = gradc.compile(g, target="onnx")(**args)
    for k in want:
        assert got[k].tobytes() == want[k].tobytes(), k


# -- C4, C5 and the battery of hostile attributes on small tensors -----------------------------

def test_huge_window_is_valid_and_equals_the_truncated_window():
    """C4: SPEC.md §5.1 bounds window_size only below, and taps in padding are never
    candidates: a window of 2**40 rows over 8 rows is the 8-row window. Every target computes
    it in time bounded by the input (it once asked for terabytes)."""
    run_child('''
        rng = np.random.default_rng(1)
        g = gradc.parse(%r)
        t = gradc.Graph("t")
        x = t.input("x", "float32", (1, 1, 8, 8))
        t.output(ops.max_pooling(x, (8, 2), output_sizes=(1, 4)), "y")
        gg = gradc.Graph("gg")
        x, dy = gg.input("x", "float32", (1, 1, 8, 8)), gg.input("dy", "float32", (1, 1, 1, 4))
        gg.output(ops.max_pooling_grad(x, dy, (2 ** 40, 2)), "dx")
        gt = gradc.Graph("gt")
        x, dy = gt.input("x", "float32", (1, 1, 8, 8)), gt.input("dy", "float32", (1, 1, 1, 4))
        gt.output(ops.max_pooling_grad(x, dy, (8, 2)), "dx")
        for huge, small in ((g, t), (gg, gt)):
            exes = stages(huge, ["reference", "numpy", "c", "onnx"])
            same_bits(exes, rng)
            args = {v.name: data(rng, v) for v in huge.inputs}
            want = gradc.compile(small, target="reference")(**args)
            got = timed("run", lambda: exes["reference"](**args))
            assert all(got[k].tobytes() == want[k].tobytes() for k in want)
    ''' % C4_TEXT)


def _battery(b: int) -> gradc.Graph:
    """Forward and gradient poolings with attribute ``b`` in every field, small outputs."""
    g = gradc.Graph(f"hostile_{b}")
    x = g.input("x", "float32", (1, 2, 8, 8))
    x5 = g.input("x5", "float32", (1, 1, 3, 4, 5))
    xi = g.input("xi", "int8", (1, 2, 8, 8))
    xu = g.input("xu", "uint64", (1, 2, 8, 8))
    xh = g.input("xh", "float16", (1, 2, 8, 8))
    cases = [  # (input, window, strides, start_padding, end_padding, dilations, output_sizes)
        (x, (b, 2), None, None, None, None, (1, 4)),                           # C4
        (x, (b, 2), None, (b - 1, 0), None, None, None),
        (x, (2, 2), (b, b), None, None, None, None),                           # C5
        (x, (2, 2), (b, b), None, None, None, (2, 2)),
        (x, (2, 3), (b, 2), (b, 1), (b, 0), None, None),                       # D7
        (x, (2, 2), (1, 2), None, None, (b, 1), (2, 4)),
        (x, (2, 2), (b, 1), (b, 0), None, (b, 1), (2, 7)),
        (x, (b, b), (b, b), None, None, None, (2, 2)),
        (x5, (b, 2, 2), (1, b, 2), (1, 0, b), (b, 1, 0), (1, 1, b), None),
        (xi, (b, 2), None, None, None, None, (1, 4)),
        (xu, (2, 2), (b, b), (b, 1), (1, b), None, None),
        (xh, (2, 2), (1, 2), None, None, (b, 1), (2, 4)),
    ]
    for j, (v, w, s, sp, ep, d, out) in enumerate(cases):
        y, i = ops.max_pooling(v, w, s, sp, ep, d, output_indices=True, output_sizes=out)
        g.output(y, f"y{j}"), g.output(i, f"i{j}")
        if v.type.dtype.is_float:
            dy = g.input(f"dy{j}", v.type.dtype, y.type.shape)
            g.output(ops.max_pooling_grad(v, dy, w, s, sp, ep, d), f"dx{j}")
    return g


@pytest.mark.parametrize("group", [BIG[:3], BIG[3:]], ids=["2^31..2^40", "2^62..2^63-1"])
def test_hostile_attributes_bounded_and_bit_exact(group):
    """C4, C5, D7 and warnings: windows, strides, paddings and dilations of 2**31 .. 2**63-1
    over small tensors: every stage is bounded, no RuntimeWarning escapes, every target
    (C scratch included, once sized by the stride) runs and matches the reference bit for
    bit, and every int the ONNX model holds fits int64."""
    run_child('''
        import inspect, sys
        sys.path.insert(0, %r)
        from test_hostile_pooling import _battery
        rng = np.random.default_rng(2)
        for b in %r:
            g = _battery(b)
            exes = stages(g, ["reference", "numpy", "c", "onnx"], seconds=3.0)
            same_bits(exes, rng, reps=1)
            model = gradc.to_onnx(g)
            for node in model.graph.node:
                for a in node.attribute:
                    for v in list(a.ints) + ([a.i] if a.type == a.INT else []):
                        assert -2 ** 63 <= v < 2 ** 63, (node.name, a.name, v)
    ''' % (str(__import__("pathlib").Path(__file__).parent), group), timeout=120)


def test_c_scratch_is_bounded_by_the_tensors_not_the_stride():
    """C5: the per-thread buffers of the C kernels (gc_alloc) are sized by the tensors, never
    by a stride, dilation or padding (a stride of 2**24 once asked for 1 GB per thread)."""
    for b in (2 ** 10, 2 ** 24, 2 ** 31, 2 ** 62):
        for kw in ({"strides": (b, b)}, {"dilations": (1, b), "strides": (1, b)},
                   {"start_padding": (1, b), "end_padding": (1, b), "strides": (2, b)}):
            g = gradc.Graph("scratch")
            x = g.input("x", "float32", ("N", 3, 8, 8))
            y = ops.max_pooling(x, (2, 2), **kw)
            dy = g.input("dy", "float32", y.type.shape)
            g.output(y, "y"), g.output(ops.max_pooling_grad(x, dy, (2, 2), **kw), "dx")
            src = generate(gradc.optimize(g).graph).source
            counts = [int(c) for c in re.findall(r"gc_alloc\(\(size_t\)(\d+) \*", src)]
            assert counts and max(counts) <= 2 ** 16, (kw, counts)


# -- D7, D8: ONNX import and export of hostile MaxPool attributes -----------------------------

def _maxpool_model(attrs: dict, shape=(1, 1, 4, 4), indices: bool = True) -> onnx.ModelProto:
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if indices:
        outs.append(helper.make_tensor_value_info("i", TensorProto.INT64, None))
    node = helper.make_node("MaxPool", ["x"], [o.name for o in outs], name="mp", **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))], outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [2, 2], "pads": [2 ** 62] * 4, "strides": [2 ** 62] * 2},
    {"kernel_shape": [2, 2], "pads": [2 ** 62] * 4, "strides": [2 ** 62] * 2, "ceil_mode": 1},
    {"kernel_shape": [3, 3], "pads": [2 ** 63 - 1] * 4, "strides": [2 ** 63 - 1] * 2},
    {"kernel_shape": [2 ** 63 - 1, 2], "pads": [2 ** 63 - 1, 0, 2 ** 63 - 1, 0],
     "strides": [2 ** 63 - 1, 1]},
    {"kernel_shape": [2 ** 63 - 1, 2], "strides": [2 ** 63 - 1, 1], "auto_pad": "SAME_UPPER"},
])
def test_imported_huge_attributes_export_and_run(attrs):
    """D7: a MaxPool that imports and verifies exports (every int fits int64: padding sums are
    Python ints), re-imports, and runs bit-exact on every target."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = gradc.from_onnx(_maxpool_model(attrs))
        model = gradc.to_onnx(g)
        onnx.checker.check_model(model, full_check=True)
        gradc.from_onnx(model)
        x = np.random.default_rng(3).integers(-3, 4, (1, 1, 4, 4)).astype(np.float32)
        want = gradc.compile(g, target="reference")(x=x)
        for t in ("numpy", "c", "onnx"):
            got = gradc.compile(g, target=t)(x=x)
            assert all(got[k].tobytes() == want[k].tobytes() for k in want), t


@pytest.mark.parametrize("sp,ep", [(2 ** 62, 2 ** 62), (2 ** 63 - 1, 2 ** 63 - 1),
                                   (2 ** 63 - 1, 0), (0, 2 ** 63 - 1)])
def test_text_ir_paddings_near_int64_export(sp, ep):
    """D7: start/end padding near 2**63 in the text IR; input + start + end passes int64."""
    g = gradc.Graph("pads")
    x = g.input("x", "float32", (1, 1, 4, 4))
    y = ops.max_pooling(x, (2, 2), (2 ** 63 - 1, 1), (sp, 1), (ep, 1), output_indices=True)
    g.output(y[0], "y"), g.output(y[1], "i")
    g = gradc.parse(str(g))
    model = gradc.to_onnx(g)
    onnx.checker.check_model(model, full_check=True)
    xv = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)[..., ::-1].copy()
    want = gradc.compile(g, target="reference")(x=xv)
    got = gradc.compile(g, target="onnx")(x=xv)
    assert all(got[k].tobytes() == want[k].tobytes() for k in want)


@pytest.mark.parametrize("attrs,field", [
    ({"kernel_shape": [2, 2], "strides": [0, 2], "ceil_mode": 1}, "strides[0]"),
    ({"kernel_shape": [2, 2], "strides": [0, 2], "auto_pad": "SAME_UPPER"}, "strides[0]"),
    ({"kernel_shape": [2, 2], "strides": [2, -1], "ceil_mode": 1}, "strides[1]"),
    ({"kernel_shape": [2, 2], "dilations": [1, 0], "auto_pad": "SAME_LOWER"}, "dilations[1]"),
    ({"kernel_shape": [0, 2], "ceil_mode": 1}, "window_size[0]"),
    ({"kernel_shape": [2, 2], "pads": [0, 0, -1, 0], "ceil_mode": 1}, "end_padding[0]"),
])
def test_maxpool_attributes_checked_before_use(attrs, field):
    """D8: a zero or negative stride (or any attribute out of range) is a VerifyError naming
    the node and the field, never a ZeroDivisionError from the size computation."""
    for indices in (False, True):
        with pytest.raises(gradc.VerifyError) as e:
            gradc.from_onnx(_maxpool_model(attrs, indices=indices))
        assert "'mp'" in str(e.value) and field in str(e.value), str(e.value)


# -- warnings -----------------------------------------------------------------------------------

def test_no_runtime_warning_escapes_on_infinities():
    """inf + -inf in an overlapping gradient window, and a float16 sum past its range: the
    reference (and the NumPy copy of it) warn nothing."""
    g = gradc.Graph("w")
    x = g.input("x", "float16", (1, 1, 1, 3))
    dy = g.input("dy", "float16", (1, 1, 1, 2))
    g.output(ops.max_pooling_grad(x, dy, (1, 2), (1, 1)), "dx")
    xv = np.array([0, 1, 0], np.float16).reshape(1, 1, 1, 3)
    for dyv in ([np.inf, -np.inf], [60000, 60000]):
        for t in ("reference", "numpy"):
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                r = gradc.compile(g, target=t)(x=xv, dy=np.array(dyv, np.float16).reshape(
                    1, 1, 1, 2))
            assert not np.isfinite(r["dx"][0, 0, 0, 1])


def test_onnx_average_pooling_refuses_a_huge_window_without_walking_it():
    """fuzz/regressions/cli: ``gradc grad -o x.onnx`` of an average pooling whose window is
    2**24 taps over a padding of 2**40 walked every candidate tap in Python (16M calls, past
    the fuzzer's 15 s) before refusing; the walk now stops at WALK_LIMIT candidates."""
    g = gradc.Graph("p")
    x = g.input("x", "float64", (1, 1, 1, 1))
    g.output(ops.average_pooling(x, window_size=[2 ** 20, 1], start_padding=[2 ** 40, 0],
                                 end_padding=[2 ** 40, 0], include_padding=True), "y")
    with pytest.raises(gradc.UnsupportedError, match="more than 262144 candidates"):
        gradc.to_onnx(g)
