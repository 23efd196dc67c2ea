"""Hostile resample graphs: the failure classes a fuzzing campaign found, one regression each.

- C1: tap tables sized by a static dim at compile time (the C plane path's baked tables, the
  ONNX export's stored taps, ``axis_taps`` over every coordinate). Past fixed budgets the C
  target and the ONNX export compute taps at run time, exactly.
- D11: a 2x2 input resampled by 1e6 (a 16 TB result): every target fails with a GradcError.
- F4: no NumPy RuntimeWarning escapes with extreme scales, offsets and data.
- The ONNX Resize importer: hostile scales and sizes give UnsupportedError / VerifyError naming
  the node and the input.
- Found on the way: ``f32(n - 1)`` rounds up to n above 2**24, and an index reached past the
  axis (IndexError in the reference, an out-of-bounds read in C, an ORT error in ONNX); and the
  ONNX export's identity shortcut for a symbolic axis was exact only below 2**21.

Cases that would allocate gigabytes if they regressed run in a child interpreter limited to
2 GiB of address space and a timeout, so a regression fails the test instead of the machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import gradc
import gradc.backends.c.resample_plane as plane
import gradc.backends.onnx.lower_resample as lower
from gradc import ops
from gradc.ir.ops.resample import axis_is_identity, axis_taps, coord_taps
from gradc.ir.verify import verify

TARGETS = ("reference", "numpy", "c", "onnx")

_PRELUDE = '''
import json, resource, sys, time, warnings
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
import numpy as np
import gradc
from gradc import ops
warnings.simplefilter("error")


def step(name, fn):
    """Run fn; print one JSON line: outcome ("ok", a GradcError class, or RAW ...), seconds,
    and how much the peak resident size grew (MiB)."""
    r0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    try:
        fn()
        out = "ok"
    except gradc.GradcError as e:
        out = type(e).__name__ + ": " + str(e)[:200]
    except BaseException as e:  # what the test is about: nothing raw escapes
        out = "RAW " + type(e).__name__ + ": " + str(e)[:200]
    grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - r0) // 1024
    print(json.dumps({"name": name, "out": out, "s": time.perf_counter() - t0, "mib": grew}),
          flush=True)
'''


def _child(body: str, timeout: float = 120) -> list[dict]:
    """Run ``body`` after ``_PRELUDE`` in a fresh interpreter (2 GiB address space)."""
    code = _PRELUDE + textwrap.dedent(body)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, p.stderr[-4000:]
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    assert rows, p.stdout[-2000:] + p.stderr[-2000:]
    return rows


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit for bit, except that a NaN matches any NaN (SPEC.md 1.6, summing ops)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind != "f":
        return bool(np.array_equal(a, b))
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b))
                and np.array_equal(a[~nan].view(np.uint8), b[~nan].view(np.uint8)))


# -- C1: tables sized by a static dim ------------------------------------------------------------

def test_c1_huge_axes_compile_small_and_fast():
    """2**31-wide outputs and dY, a 2**40 leading axis: every entry point is cheap."""
    rows = _child('''
        import onnx
        from gradc.ir.verify import verify
        TEXT = """graph g(%x: f32[1,1,1,1]) {
          %y = resample(%x) {scales = [1.0, 1.0, 1.0, 2147483648.0]MODE} : f32[1,1,1,2147483648]
          return %y
        }"""
        graphs = {
            "up_nearest": lambda: gradc.parse(TEXT.replace("MODE", "")),
            "up_linear": lambda: gradc.parse(TEXT.replace(
                "MODE", ', interpolation_mode = "linear"')),
        }
        def grad_wide_out():
            g = gradc.Graph("g"); dy = g.input("dy", "float32", (1, 1, 1, 3))
            g.output(ops.resample_grad(dy, (1, 1, 1, 2**31), (1, 1, 1, 2.0**31), "linear"), "y")
            return g
        def grad_wide_dy():
            g = gradc.Graph("g"); dy = g.input("dy", "float32", (1, 1, 1, 2**31))
            g.output(ops.resample_grad(dy, (1, 1, 1, 3), (1, 1, 1, 2.0**-31)), "y")
            return g
        def lead():
            g = gradc.Graph("g"); x = g.input("x", "float32", (2**40, 1, 1, 2))
            g.output(ops.resample(x, (1, 1, 1, 2.0), "linear"), "y")
            return g
        graphs.update(grad_wide_out=grad_wide_out, grad_wide_dy=grad_wide_dy, lead=lead)
        for name, make in graphs.items():
            g = make()
            step(f"{name} parse", lambda: gradc.parse(str(g)))
            step(f"{name} verify", lambda: verify(g))
            step(f"{name} optimize", lambda: gradc.optimize(g))
            step(f"{name} to_onnx", lambda: gradc.to_onnx(g))
            for t in ("reference", "numpy", "c", "onnx"):
                step(f"{name} compile {t}", lambda: gradc.compile(g, target=t))
        # the 117-byte model of the report: Resize to width 2**31 (sizes initializer), opset 19
        node = onnx.helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="nearest")
        sizes = onnx.numpy_helper.from_array(np.array([1, 1, 1, 2**31], np.int64), "sizes")
        f = onnx.TensorProto.FLOAT
        model = onnx.helper.make_model(onnx.helper.make_graph(
            [node], "g", [onnx.helper.make_tensor_value_info("x", f, [1, 1, 1, 1])],
            [onnx.helper.make_tensor_value_info("y", f, None)], [sizes]),
            opset_imports=[onnx.helper.make_opsetid("", 19)])
        def roundtrip():
            out = gradc.to_onnx(gradc.from_onnx(model))
            assert out.ByteSize() < 1 << 16, out.ByteSize()
        step("resize_2^31 from_onnx+to_onnx", roundtrip)
    ''')
    bad = [r for r in rows if r["out"] != "ok" or r["mib"] > 200 or r["s"] > 20]
    assert not bad, bad


def test_c1_budgets_are_named_and_plans_refuse_beyond_them():
    assert plane.MAX_BAKED_COORDS == 1 << 16 and plane.MAX_BAKED_GATHER == 1 << 18
    assert lower.MAX_FOLDED_COORDS == 1 << 16
    attrs = {"scales": (1.0, 1.0, 1.0, 3.4e38), "input_pixel_offsets": (0.5,) * 4,
             "output_pixel_offsets": (-0.5,) * 4, "interpolation_mode": "linear",
             "rounding_direction": "decreasing"}
    # beyond the per-axis budget: refused before any table is built
    assert plane.plan_static_plane(attrs, [1, 1, 1, 2**31], [1, 1, 1, 3], 3) is None
    assert plane.plan_static_plane(attrs, [1, 1, 1, 3], [1, 1, 1, 2**31], 3) is None
    assert plane.plan_static_plane(attrs, [1, 1, 1, None], [1, 1, 1, None], 3) is None  # symbolic
    # every dY column lands on output column 0: the gather table would be ny x no (quadratic)
    n = 4096
    assert plane.plan_static_plane(attrs, [1, 1, 1, n], [1, 1, 1, n], 3) is None
    ok = dict(attrs, scales=(1.0, 1.0, 1.0, 2.0))
    assert plane.plan_static_plane(ok, [1, 1, 1, 2 * n], [1, 1, 1, n], 3) is not None


def _exactness_graphs():
    """Graphs whose taps take every run-time path when the budgets are 0 (see below)."""
    f32 = "float32"

    def g1():  # linear, symbolic scale-1 axis with the identity shortcut, odd scales
        g = gradc.Graph("g1")
        x = g.input("x", f32, ("N", 2, 5, 3))
        g.output(ops.resample(x, (1, 1, 1.5, 0.75), "linear"), "y")
        return g, {"x": (3, 2, 5, 3)}

    def g2():  # nearest "increasing", offsets that are not the half-pixel ones
        g = gradc.Graph("g2")
        x = g.input("x", f32, (2, 3, 4))
        g.output(ops.resample(x, (1, 2.5, 0.5), "nearest", "increasing", (0.5, 0.25, 0.0),
                              (-0.5, 0.3, -0.25), output_sizes=(2, 9, 3)), "y")
        return g, {"x": (2, 3, 4)}

    def g3():  # linear grad, symbolic plane-split axis
        g = gradc.Graph("g3")
        dy = g.input("dy", f32, ("N", 6, 7))
        g.output(ops.resample_grad(dy, ("N", 3, 4), (1, 2, 1.75), "linear"), "y")
        return g, {"dy": (2, 6, 7)}

    def g4():  # every dY column into output column 0: the run-time gather gives up (slack)
        g = gradc.Graph("g4")
        dy = g.input("dy", f32, (2, 64))
        g.output(ops.resample_grad(dy, (2, 64), (1, 3e38), "linear"), "y")
        return g, {"dy": (2, 64)}

    return [g1, g2, g3, g4]


@pytest.mark.parametrize("make", _exactness_graphs(), ids=lambda f: f.__name__)
def test_c1_runtime_taps_are_exact(make, monkeypatch):
    """With every budget 0 the C target gathers from run-time tables and the ONNX export
    computes every axis' taps in the model (the identity shortcut only under its If): the
    results are those of the reference (C bit for bit, also with inf/NaN in the data)."""
    monkeypatch.setattr(plane, "MAX_BAKED_COORDS", 0)
    monkeypatch.setattr(lower, "MAX_FOLDED_COORDS", 0)
    monkeypatch.setattr(lower, "EXACT_SHIFT", 2)  # sizes >= 2 take the If's else branch
    g, shapes = make()
    rng = np.random.default_rng(7)
    feeds = [{k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}]
    special = {k: v.copy() for k, v in feeds[0].items()}
    for v in special.values():
        v.reshape(-1)[[0, -1]] = (np.inf, np.nan)
    feeds.append(special)
    c, ox = gradc.compile(g, target="c"), gradc.compile(g, target="onnx")
    assert "GW[" not in c.source and "RI" not in c.source  # nothing baked
    ref = gradc.compile(g, target="reference")
    for feed in feeds:
        want = ref(**feed)["y"]
        assert _bits_equal(c(**feed)["y"], want)
        got = ox(**feed)["y"]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, equal_nan=True)


def test_axis_is_identity_matches_axis_taps_and_is_bounded():
    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.choice([1, 2, 7, 100, 70_000]))
        f = (float(np.float32(rng.choice([1.0, 1.0, 0.999999, 2.0]))),
             float(rng.choice([0.5, 0.0, 0.25, 0.75, 1e-8])),
             float(rng.choice([-0.5, 0.0, -0.25, 1e-8])))
        rounding = str(rng.choice(["decreasing", "increasing"]))
        want = np.array_equal(axis_taps(n, n, *f, "nearest", rounding)[0][0], np.arange(n))
        assert axis_is_identity(n, *f, rounding) == want
    assert not axis_is_identity(2**40, 1.0, 0.0, 0.0, "decreasing")  # no work at all
    assert axis_is_identity(2**24 + 1, 1.0, 0.0, 0.0, "decreasing")  # the longest identity


def test_c1_identity_check_on_a_huge_axis_is_bounded():
    """canonicalize's identity rule on a 2**40 axis (it used to ask axis_taps for 4 TiB)."""
    rows = _child('''
        g = gradc.Graph("g"); x = g.input("x", "float32", (2**40, 1, 1, 2))
        g.output(ops.resample(x, (1, 1, 1, 1)), "y")
        step("optimize", lambda: gradc.optimize(g))
    ''')
    assert all(r["out"] == "ok" and r["mib"] < 200 for r in rows), rows


def test_index_never_passes_the_axis():
    """n = 2**24 + 4: f32(n - 1) rounds up to n, and scale 1 with half-pixel offsets maps the
    last coordinate there. Every target clamps the index to n - 1 (as integers)."""
    n = 2**24 + 4
    (idx, _), = coord_taps(np.float32([n - 1, n + 10, 3e38]), n, 1.0, 0.5, -0.5, "nearest",
                           "decreasing")
    assert idx.tolist() == [n - 1] * 3
    taps = coord_taps(np.float32([n - 1, 3e38]), n, 1.0, 0.5, -0.5, "linear", "decreasing")
    assert max(int(t[0].max()) for t in taps) == n - 1
    rows = _child(f'''
        from gradc.ir.ops.resample import axis_taps
        n = {n}
        x = (np.arange(n) % 101).astype(np.int8)
        (idx, _), = axis_taps(n, n, 1.0, 0.5, -0.5, "nearest", "decreasing")  # the reference's
        want = x[idx]
        assert want[-1] == x[-1]
        g = gradc.Graph("g")
        v = g.input("x", "int8", ("N",))
        g.output(ops.resample(v, (1.0,)), "y")
        for t in ("c", "onnx"):
            def run():
                y = gradc.compile(g, target=t)(x=x)["y"]
                assert np.array_equal(y, want), t
            step(t, run)
    ''')
    assert all(r["out"] == "ok" for r in rows), rows


# -- D11: allocation failures at run time ---------------------------------------------------------

def test_d11_huge_results_fail_cleanly():
    """2x2 resampled by 1e6 (16 TB), and results that fit but leave no room for a second
    buffer of their size: a GradcError (or success), never a raw MemoryError or a crash."""
    rows = _child('''
        ones = np.ones((1, 1, 2, 2), np.float32)
        for grad in (False, True):
            g = gradc.Graph("g"); x = g.input("x", "float32", (1, 1, 2, 2))
            if grad:
                g.output(ops.resample_grad(x, (1, 1, 2000000, 2000000), (1, 1, 1e-6, 1e-6),
                                           "linear"), "y")
            else:
                g.output(ops.resample(x, (1, 1, 1e6, 1e6), "linear"), "y")
            for t in ("reference", "numpy", "c", "onnx"):
                step(f"16TB grad={grad} {t}",
                     lambda: gradc.compile(g, target=t)(x=ones))
        # 1.6 GB results under a 2 GiB limit: the C kernels' second buffer cannot be allocated
        two = np.ones((1, 1, 1, 2), np.float32)
        g = gradc.Graph("g"); x = g.input("x", "float32", (1, 1, 1, 2))
        g.output(ops.resample_grad(x, (1, 1, 1, 400_000_000), (1, 1, 1, 2e8), "linear"), "y")
        for t in ("reference", "numpy", "c"):
            step(f"1.6GB grad {t}", lambda: gradc.compile(g, target=t)(x=two))
    ''')
    bad = [r for r in rows if r["out"].startswith("RAW")]
    assert not bad, bad
    assert all(r["out"] != "ok" for r in rows if r["name"].startswith("16TB")), rows


# -- F4: no RuntimeWarning ------------------------------------------------------------------------

def _f4_graphs():
    big, tiny = 3e38, 1e-30

    def linear_f16():
        g = gradc.Graph("f16")
        x = g.input("x", "float16", (2, 3, 3, 4))
        g.output(ops.resample(x, (big, tiny, 1.5, 2.0**20), "linear", "decreasing",
                              (big, -big, 0.5, 0.5), (-big, big, -0.5, 3e38),
                              output_sizes=(2, 3, 4, 5)), "y")
        return g, "x", np.float16

    def grad_f32():
        g = gradc.Graph("grad")
        dy = g.input("dy", "float32", (2, 3, 3, 4))
        g.output(ops.resample_grad(dy, (3, 2, 4, 3), (tiny, big, 2.0**-31, 1e-38), "linear",
                                   "increasing", (-big, 0.5, big, 0.5), (big, -0.5, -big, 0.5)),
                 "y")
        return g, "dy", np.float32

    def nearest_i8():
        g = gradc.Graph("i8")
        x = g.input("x", "int8", (2, 3, 3, 4))
        g.output(ops.resample(x, (big, tiny, 1e-38, 2.0**31), "nearest", "increasing",
                              (big, -big, big, 0.5), (-big, big, big, -0.5),
                              output_sizes=(1, 2, 3, 4)), "y")
        return g, "x", np.int8

    return [linear_f16, grad_f32, nearest_i8]


@pytest.mark.parametrize("make", _f4_graphs(), ids=lambda f: f.__name__)
def test_f4_no_runtime_warnings(make):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g, name, dt = make()
        text = str(g)
        verify(gradc.parse(text))
        gradc.optimize(g)
        if np.dtype(dt).kind == "f":
            info = np.finfo(dt)
            data = np.array([info.max, -info.max, np.inf, -np.inf, np.nan, 0.0, -0.0, 1.0,
                             info.tiny, 3.0, info.max, 2.0], dt)
        else:
            data = np.array([127, -128, 0, 1, -1, 5, 100, -100, 3, 4, 2, 7], dt)
        arr = np.resize(data, g.inputs[0].type.shape).astype(dt)
        results = {t: gradc.compile(g, target=t)(**{name: arr})["y"] for t in TARGETS}
        str(results["reference"])  # printing the results warns about nothing either
    for t in ("numpy", "c"):
        assert _bits_equal(results[t], results["reference"]), t


# -- the ONNX Resize importer ---------------------------------------------------------------------

def _resize_model(shape, scales=None, sizes=None, roi=None, coord="half_pixel",
                  scales_dtype=np.float32, sizes_dtype=np.int64) -> onnx.ModelProto:
    inits, ins = [], ["x", "", "", ""]
    for k, (v, dt, name) in enumerate(((roi, np.float64, "roi"), (scales, scales_dtype, "scales"),
                                       (sizes, sizes_dtype, "sizes"))):
        if v is not None:
            inits.append(numpy_helper.from_array(np.array(v, dt), name))
            ins[k + 1] = name
    while ins[-1] == "":
        ins.pop()
    node = helper.make_node("Resize", ins, ["y"], name="rz", mode="nearest",
                            coordinate_transformation_mode=coord)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, shape)], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


HOSTILE_RESIZE = {
    "scale 0": (dict(scales=[1, 1, 1, 0]), gradc.VerifyError, "scales[3]"),
    "scale -2": (dict(scales=[1, 1, 1, -2]), gradc.VerifyError, "scales[3]"),
    "scale nan": (dict(scales=[1, 1, 1, np.nan]), gradc.VerifyError, "scales[3]"),
    "scale inf": (dict(scales=[1, 1, 1, np.inf]), gradc.VerifyError, "scales[3]"),
    "scale 1e300": (dict(scales=[1, 1, 1, 1e300], scales_dtype=np.float64), gradc.VerifyError,
                    "scales[3]"),
    "scale 1e-300": (dict(scales=[1, 1, 1, 1e-300], scales_dtype=np.float64), gradc.VerifyError,
                     "scales[3]"),
    "scale 3e38": (dict(scales=[1, 1, 1, 3e38]), gradc.VerifyError, "scales[3]"),
    "size 0": (dict(sizes=[1, 1, 2, 0]), gradc.UnsupportedError, "sizes[3]"),
    "size -1": (dict(sizes=[1, 1, 2, -1]), gradc.VerifyError, "sizes[3]"),
    "size 2**62": (dict(sizes=[1, 1, 2, 2**62]), gradc.VerifyError, "input sizes"),
    "size 2**63": (dict(sizes=[1, 1, 2, 2**63], sizes_dtype=np.uint64), gradc.VerifyError,
                   "sizes[3]"),
    "size 2**64-1": (dict(sizes=[1, 1, 2, 2**64 - 1], sizes_dtype=np.uint64), gradc.VerifyError,
                     "sizes[3]"),
    "sizes 2**40 x 2**40": (dict(sizes=[1, 1, 2**40, 2**40]), gradc.VerifyError, "input sizes"),
    "roi 5e-324 wide": (dict(sizes=[1, 1, 2, 2**40], coord="tf_crop_and_resize",
                             roi=[0, 0, 0, 0, 1, 1, 1, 5e-324]), gradc.UnsupportedError,
                        "input roi"),
}


@pytest.mark.parametrize("case", list(HOSTILE_RESIZE))
def test_import_resize_validates_scales_and_sizes(case):
    kwargs, error, field = HOSTILE_RESIZE[case]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(error) as info:
            gradc.from_onnx(_resize_model([1, 1, 2, 3], **kwargs))
    assert "Resize 'rz'" in str(info.value) and field in str(info.value), str(info.value)


def test_resample_infer_names_the_field_of_a_huge_result():
    g = gradc.Graph("g")
    x = g.input("x", "float32", (1, 1, 1, 1))
    with pytest.raises(gradc.VerifyError, match=r"resample: scales\[3\]: .*2\*\*63"):
        ops.resample(x, (1, 1, 1, 1e38))
    with pytest.raises(gradc.VerifyError, match=r"resample: scales: .*2\*\*62 bytes"):
        ops.resample(x, (1, 1, 1, 2.0**62))
    with pytest.raises(gradc.VerifyError, match=r"resample_grad: output_sizes: .*2\*\*62 bytes"):
        ops.resample_grad(x, (1, 1, 2**40, 2**40), (1, 1, 1, 1))
