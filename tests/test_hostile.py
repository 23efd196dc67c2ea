"""Hostile and huge input (issue 10): one regression test per failure class of the fuzzing
campaign, outside pooling and resampling (tests/test_hostile_pooling.py and
tests/test_hostile_resample.py hold those).

The contract under test: every public entry point succeeds or raises a GradcError, in bounded
time and memory. Cases that would allocate gigabytes if they regressed run in a child process
under an address-space limit (``isolated``), so a regression fails the test instead of the
machine.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.cli import main
from gradc.errors import (GradcError, InputError, ParseError, ResourceError, UnsupportedError,
                          VerifyError)
from gradc.ir.types import MAX_BYTES, TensorType, byte_size, element_count, fmt_bytes

TARGETS = ["reference", "numpy", "c", "onnx"]
LIMIT = 2 << 30  # address space of an isolated case: a regression fails, it does not swap


def isolated(code: str, timeout: float = 60) -> dict:
    """Run ``code`` in a child under LIMIT bytes of address space; it sets ``result`` (JSON).

    Returns ``{"result": ..., "error": "Type: message" | None, "seconds": wall time}``.
    """
    prog = textwrap.dedent("""
        import json, sys, time, traceback
        import numpy as np, gradc
        from gradc import ops
        t0 = time.perf_counter(); result = None; error = None
        try:
            exec(compile(sys.stdin.read(), "case", "exec"))
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        print(json.dumps({"result": result, "error": error,
                          "seconds": time.perf_counter() - t0}))
    """)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))

    p = subprocess.run([sys.executable, "-c", prog], input=textwrap.dedent(code), text=True,
                       capture_output=True, timeout=timeout, preexec_fn=limit)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def text_graph(body: str, inputs: str) -> str:
    return f"graph g({inputs}) {{\n{textwrap.dedent(body).strip()}\n}}"


# -- one way to count: element counts and byte sizes -------------------------------------------

def test_element_count_is_exact_where_int64_wraps():
    assert element_count([2 ** 32, 2 ** 32]) == 2 ** 64  # int64: 0
    assert element_count([4294967296, 4294967296, 4]) == 2 ** 66
    assert element_count(["N", 3, 4]) == 12 and element_count([]) == 1
    assert byte_size([2 ** 20, 3], gradc.DType.float64) == 3 * 2 ** 23
    assert fmt_bytes(3 * 2 ** 40) == f"{3 * 2 ** 40} bytes (3 TiB)"
    assert TensorType("f32", (2 ** 60,)).nbytes == MAX_BYTES


@pytest.mark.parametrize("dtype,shape", [
    ("f32", (2 ** 60 + 1,)), ("f32", (2 ** 32, 2 ** 32)), ("u8", (2 ** 31, 2 ** 31, 2)),
    ("f64", ("N", 2 ** 60)),  # N >= 1: at least 2**63 bytes
])
def test_a_type_larger_than_2_62_bytes_is_a_verify_error(dtype, shape):
    with pytest.raises(VerifyError, match=r"more than the 2\*\*62 bytes a tensor may hold"):
        TensorType(dtype, shape)


# -- D1, D2, F3: literals the parser cannot hold ---------------------------------------------

def test_d1_array_literal_whose_element_count_wraps_is_a_parse_error_with_position():
    text = text_graph("""
        %w = constant() {value = array<f32[4611686018427387904,4]: []>} : f32[4611686018427387904,4]
        return %w""", "%x: f32[1]")
    with pytest.raises(ParseError, match="more than the 2") as e:
        gradc.parse(text)
    assert (e.value.line, e.value.column) == (2, 32)  # the type after "array<"


def test_d1_through_the_ir_embedded_in_an_onnx_file():
    from gradc.backends.onnx.format import IR_KEY
    g = gradc.Graph("g")
    g.output(ops.relu(g.input("x", "f32", [1])))
    model = gradc.to_onnx(g)
    huge = "f32[4611686018427387904,4]"
    for p in model.metadata_props:
        if p.key == IR_KEY:
            p.value = text_graph(f"""
                %w = constant() {{value = array<{huge}: []>}} : {huge}
                return %w""", "%x: f32[1]")
    with pytest.raises(ParseError, match=r"embedded gradc IR .* 2:32: type f32\[46"):
        gradc.from_onnx(model.SerializeToString())


def test_d2_integer_literal_beyond_pythons_digit_limit():
    with pytest.raises(ParseError, match="out of range") as e:
        gradc.parse("graph g(%x: f32[" + "9" * 5000 + "]) {\n  return %x\n}")
    assert (e.value.line, e.value.column) == (1, 17)
    with pytest.raises(ParseError, match="out of range"):
        gradc.parse(text_graph("""
            %y = reshape(%x) {shape = [""" + "1" * 4400 + """]} : f32[2]
            return %y""", "%x: f32[2]"))


@pytest.mark.parametrize("dim", ["9223372036854775808", "18446744073709551616", "0"])
def test_f3_dim_out_of_range_has_line_and_column(dim):
    with pytest.raises(ParseError) as e:
        gradc.parse(f"graph g(%x: f32[{dim}]) {{\n  return %x\n}}")
    assert (e.value.line, e.value.column) == (1, 17)


# -- D3, D4: reshape sizes in exact arithmetic -----------------------------------------------

@pytest.mark.parametrize("shape,match", [
    ([2 ** 64, -1], r"shape\[0\]: expected an integer in \[-1, 2\*\*63 - 1\]"),
    ([4294967296, 4294967296, -1], "product divides 6"),       # int64 product: 0
    ([4294967296, 4294967296, 2, 3], "product is 6"),          # int64 product wraps
    ([-2, 3], r"shape\[0\]"),
])
def test_d3_d4_reshape_dims_that_overflow_int64(shape, match):
    g = gradc.Graph("g")
    x = g.input("x", "f32", [2, 3])
    with pytest.raises(VerifyError, match=match):
        ops.reshape(x, shape=shape)


def test_every_integer_attribute_is_an_int64():
    g = gradc.Graph("g")
    x = g.input("x", "f32", [1, 1, 4, 4])
    with pytest.raises(VerifyError, match=r"strides\[0\]: expected an integer in int64's range"):
        ops.max_pooling(x, window_size=[2, 2], strides=[2 ** 64, 1])


# -- D5, D6: folding counts exactly and never computes a huge constant -----------------------

def test_d5_constant_folding_of_a_huge_result_is_skipped():
    r = isolated("""
        g = gradc.Graph("g")
        x = g.input("x", "f32", [1])
        c = ops.constant(np.ones((1, 4), np.float32), graph=g)
        g.output(ops.slice_grad(c, output_sizes=[2 ** 40, 4], input_window_offsets=[0, 0],
                                input_window_sizes=[1, 4], input_window_strides=[1, 1]))
        o = gradc.optimize(g)
        result = [n.op for n in o.graph.nodes]
    """)
    assert r["error"] is None and "slice_grad" in r["result"], r
    assert r["seconds"] < 10


def test_d6_onnx_export_does_not_fold_a_huge_expand():
    r = isolated("""
        g = gradc.parse('''graph g(%x: f32[1073741824,1073741824]) {
          %c = constant() {value = array<f32[1,1]: [1.0]>} : f32[1,1]
          %y = expand(%c, %x) : f32[1073741824,1073741824]
          return %y
        }''')
        m = gradc.to_onnx(g)
        result = [n.op_type for n in m.graph.node]
    """)
    assert r["error"] is None and "Expand" in r["result"], r


# -- C6, D9: no recursion limit, bounded C build ---------------------------------------------

def _chain_model(n: int) -> bytes:
    from onnx import TensorProto, helper
    nodes = [helper.make_node("Relu" if i % 2 else "Neg", [f"v{i}"], [f"v{i + 1}"])
             for i in range(n)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info(
        "v0", TensorProto.FLOAT, [5])], [helper.make_tensor_value_info(
            f"v{n}", TensorProto.FLOAT, [5])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]) \
        .SerializeToString()


def test_d9_a_1500_op_elementwise_chain_on_every_target():
    g = gradc.from_onnx(_chain_model(1500))
    x = np.array([-2.0, -0.0, 0.0, 1.5, np.nan], np.float32)
    want = gradc.compile(g, target="reference", passes=None)(v0=x)
    for t in TARGETS:
        got = gradc.compile(g, target=t, passes=["fuse-elementwise"])(v0=x)
        np.testing.assert_array_equal(got["v1500"], want["v1500"])
    t = gradc.grad(g)
    dy = np.arange(5, dtype=np.float32)
    ref = gradc.compile(t, target="reference")(v0=x, grad_v1500=dy)
    got = gradc.compile(t, target="c")(v0=x, grad_v1500=dy)
    np.testing.assert_array_equal(got["grad_v0"], ref["grad_v0"])


def test_c6_fused_groups_are_bounded_so_the_c_build_stays_linear():
    from gradc.passes.fuse_elementwise import MAX_GROUP_NODES, find_groups
    g = gradc.Graph("g")
    xs = [g.input(f"x{i}", "f32", [2]) for i in range(300)]
    s = xs[0]
    for x in xs[1:]:
        s = ops.add(s, ops.relu(x))
    g.output(ops.reduce_sum(s))
    groups = find_groups(gradc.grad(g))
    assert groups and max(len(m) for m in groups) <= MAX_GROUP_NODES
    assert sum(len(m) for m in groups) >= 590  # still fused, in several loops


def test_c6_the_c_entry_is_written_in_parts_so_its_build_stays_linear():
    from gradc.backends.c.emit import STEPS_PER_PART
    g = gradc.Graph("g")
    v = g.input("x", "f64", [2, 3])
    for _ in range(2 * STEPS_PER_PART + 5):
        v = ops.neg(ops.relu(v)) if _ % 2 else ops.relu(v)
    g.output(v, "y")
    ex = gradc.compile(g, target="c", passes=None)
    parts = -(-len(g.nodes) // STEPS_PER_PART)  # one step per node here
    assert parts >= 3
    assert f"gc_part{parts - 1}(" in ex.source and f"gc_part{parts}(" not in ex.source
    x = np.array([[-1.0, 2.0, np.nan], [0.5, -0.0, np.inf]])
    want = gradc.compile(g, target="reference", passes=None)(x=x)["y"]
    np.testing.assert_array_equal(ex(x=x)["y"], want)


def test_c6_relu_chains_collapse_in_linear_rewrites():
    g = gradc.Graph("g")
    v = g.input("x", "f32", [3])
    for _ in range(3000):
        v = ops.relu(v)
    g.output(v)
    o = gradc.optimize(gradc.grad(g))
    assert [n.op for n in o.graph.nodes].count("relu") <= 1


def test_c6_a_hanging_c_compiler_is_a_gradc_error(tmp_path, monkeypatch):
    from gradc.backends.c import build
    cc = tmp_path / "slowcc"
    cc.write_text("#!/bin/sh\ncase \"$*\" in *--version*) echo slowcc 1.0;; "
                  "*probe*) exit 1;; *) sleep 30;; esac\n")
    cc.chmod(0o755)
    monkeypatch.setattr(build, "CC_TIMEOUT", 1.0)
    g = gradc.Graph("hangs")
    g.output(ops.relu(g.input("x", "f32", [2])))
    with pytest.raises(GradcError, match=r"did not finish within 1 s on graph 'hangs'"):
        gradc.compile(g, target="c", cc=str(cc), cache_dir=str(tmp_path / "cache"))


# -- D10, D11, D12, F2: the call boundary -----------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_d10_an_input_named_self(target):
    g = gradc.Graph("g")
    g.output(ops.relu(g.input("self", "f32", [2])), "arrays")
    out = gradc.compile(g, target=target)(**{"self": np.array([-1.0, 2.0], np.float32)})
    np.testing.assert_array_equal(out["arrays"], [0.0, 2.0])


@pytest.mark.parametrize("target", TARGETS)
def test_d11_a_huge_broadcast_view_is_refused_before_allocating(target):
    g = gradc.Graph("g")
    g.output(ops.relu(g.input("x", "f32", ["N", 3])), "y")
    big = np.broadcast_to(np.ones((1, 3), np.float32), (2 ** 40, 3))
    with pytest.raises((ResourceError, InputError), match=r"%\w+: f32\[N,3\]|C-contiguous"):
        gradc.compile(g, target=target)(x=big)


def test_d11_symbols_whose_sizes_wrap_int64_are_a_resource_error():
    """More than 2**62 bytes: beyond what any target addresses (issue 25: one class, a
    ResourceError naming the value, at compile time and at call time alike)."""
    g = gradc.Graph("g")
    x = g.input("x", "f32", ["N", 1])
    y = g.input("y", "f32", [1, "N"])
    g.output(ops.add(x, y), "z")  # f32[N,N]
    big = np.broadcast_to(np.ones((1, 1), np.float32), (2 ** 32, 1))
    for t in ("reference", "numpy"):
        with pytest.raises(ResourceError, match=r"%z: f32\[N,N\] with N=4294967296 is"):
            gradc.compile(g, target=t)(x=big, y=big.T)


def test_d11_run_time_out_of_memory_names_the_value_and_bytes():
    # Each value (1.3 GB) fits the child's 2 GiB address space; the run does not.
    r = isolated("""
        g = gradc.Graph("g")
        x = g.input("x", "f32", [1, 1, 2, 2])
        up = ops.resample(x, scales=[1.0, 1.0, 9000.0, 9000.0])  # f32[1,1,18000,18000]
        g.output(ops.add(up, up), "twice")
        res = []
        for t in ["reference", "numpy", "onnx", "c"]:
            try:
                gradc.compile(g, target=t, passes=None)(x=np.ones((1, 1, 2, 2), np.float32))
                res.append("ran")
            except gradc.GradcError as e:
                res.append(type(e).__name__ + ": " + str(e))
        result = res
    """, timeout=300)
    assert r["error"] is None, r
    # numpy and onnx may reuse the first buffer for the second and run; the others must not
    # fail any other way than a ResourceError naming the value and its bytes.
    for line in r["result"]:
        assert line == "ran" or "f32[1,1,18000,18000] needs 1296000000 bytes" in line, line
    assert r["result"][0].startswith("ResourceError"), r["result"]


class Evil(np.ndarray):
    """A subclass whose own methods must never run inside gradc."""

    def __getitem__(self, key):
        raise RuntimeError("Evil.__getitem__ ran")

    def reshape(self, *a, **k):
        raise RuntimeError("Evil.reshape ran")


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
@pytest.mark.parametrize("target", TARGETS)
def test_d12_f2_subclasses_become_plain_arrays(target):
    g = gradc.Graph("g")
    x = g.input("x", "f32", [2, 2])
    g.output(ops.reduce_sum(ops.relu(x), axes=[0, 1]), "s")
    g.output(ops.max_pooling(ops.reshape(x, shape=[1, 1, 2, 2]), window_size=[2, 2]), "m")
    ex = gradc.compile(g, target=target)
    a = np.array([[1.0, -2.0], [3.0, 4.0]], np.float32)
    for arg in (a.view(Evil), np.asmatrix(a)):
        out = ex(x=arg)
        assert type(out["s"]) is np.ndarray and out["s"].shape == ()
        assert out["s"] == 8.0 and out["m"].reshape(-1)[0] == 4.0


@pytest.mark.parametrize("target", ["c", "numpy"])
def test_static_inputs_matched_first_still_refuse_every_mismatch(target):
    """A graph without symbols checks its arrays against the static signature first; any
    mismatch falls through to the checks that name it (a step's state passed each call)."""
    g = gradc.Graph("g")
    x = g.input("x", "f32", [2, 3])
    w = g.parameter("w", np.ones((3,), np.float32))
    g.output(ops.mul(x, w), "y")
    ex = gradc.compile(g, target=target)
    assert ex._static is not None
    a = np.ones((2, 3), np.float32)
    assert ex(x=a, w=np.full(3, 2.0, np.float32))["y"].tolist() == [[2.0] * 3] * 2
    cases = [({"x": a.astype(np.float64)}, "expected dtype float32, got float64"),
             ({"x": a.reshape(3, 2)}, r"expected shape \(2, 3\), got \(3, 2\)"),
             ({"x": a, "z": a}, "unexpected input 'z'"),
             ({"x": a, "w": np.ones(4, np.float32)}, r"input 'w': expected shape \(3,\)"),
             ({"x": [[1.0] * 3] * 2}, "expected a numpy.ndarray, got list"),
             ({}, "input 'x': missing")]
    if target == "c":
        cases.append(({"x": np.ones((2, 6), np.float32)[:, ::2]}, "C-contiguous"))
    for kw, msg in cases:
        with pytest.raises(InputError, match=msg):
            ex(**kw)
    h = gradc.Graph("h")
    h.output(ops.relu(h.input("x", "f32", ["N", 3])), "y")
    assert gradc.compile(h, target=target)._static is None  # a symbol: the full checks


def test_masked_arrays_are_refused():
    g = gradc.Graph("g")
    g.output(ops.relu(g.input("x", "f32", [2])))
    with pytest.raises(InputError, match="masked array"):
        gradc.compile(g, target="reference")(x=np.ma.masked_array(np.ones(2, np.float32)))


# -- D13: names that are not valid text ------------------------------------------------------

def test_d13_lone_surrogates_are_refused_in_names():
    bad = json.dumps("\ud800")
    with pytest.raises(ParseError, match="lone surrogate U\\+D800") as e:
        gradc.parse(f"graph g(%{bad}: f32[2]) {{\n  return %{bad}\n}}")
    assert e.value.line == 1
    with pytest.raises(VerifyError, match="lone surrogate"):
        gradc.Graph("g").input("x\udfff", "f32", [2])
    with pytest.raises(VerifyError, match="lone surrogate"):
        gradc.Graph("\ud83d")
    with pytest.raises(VerifyError, match="lone surrogate"):
        TensorType("f32", ("N\ud800",))


# -- F1: print/parse round trip ---------------------------------------------------------------

@pytest.mark.parametrize("bound", [-2147483648.0, 16777217.0, 0.1, -0.0, 1e300, 2.0 ** -149])
def test_f1_float_attributes_round_trip_exactly(bound):
    g = gradc.Graph("g")
    x = g.input("x", "f64", [2])
    dy = g.input("dy", "f64", [2])
    g.output(ops.clip_grad(x, dy, min=bound, max=max(bound, 0.0) + 1.0))
    text = str(g)
    back = gradc.parse(text)
    assert back == g, text
    assert str(back) == text


# -- F4: no RuntimeWarning escapes -------------------------------------------------------------

def test_f4_no_runtime_warning_escapes_printing_or_running():
    g = gradc.Graph("g")
    x = g.input("x", "f32", [1, 1, 2, 2])
    g.output(ops.resample(x, scales=[1.0, 1.0, 1.0, 1.0], interpolation_mode="linear",
                          output_pixel_offsets=[0.0, 0.0, 3e38, -3e38]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        str(gradc.parse(str(g)))
        for t in TARGETS:
            gradc.compile(g, target=t)(x=np.full((1, 1, 2, 2), 3e38, np.float32))


# -- K1: the command line ---------------------------------------------------------------------

def _cli(argv: list[str], capsys) -> tuple[int, str]:
    rc = main(argv)
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("text", [
    "graph g(%x: f32[2]) {\n  %y = reshape(%x) {shape = [18446744073709551616]} : f32[2]\n"
    "  return %y\n}",
    "graph g(%x: f32[" + "9" * 5000 + "]) {\n  return %x\n}",
    "graph g(%x: f32[4294967296,4294967296]) {\n  return %x\n}",
    "graph g(%\"\\ud800\": f32[2]) {\n  return %\"\\ud800\"\n}",
])
@pytest.mark.parametrize("command", [["verify"], ["compile", "-t", "c"], ["run"], ["check"]])
def test_k1_bad_files_exit_2_with_a_line_naming_the_file(tmp_path, capsys, text, command):
    path = tmp_path / "bad.ir"
    path.write_text(text, encoding="utf-8")
    rc, err = _cli([command[0], str(path), *command[1:]], capsys)
    assert rc == 2, err
    assert err.startswith(f"gradc: error: {path}"), err
    assert "internal error" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("shape", ["N=0", "N=-1", "N=" + "9" * 30, "N=²", "N=1e3"])
def test_k1_bad_shape_flags(capsys, shape):
    rc, err = _cli(["run", "example:cnn", "--shape", shape], capsys)
    assert rc == 2 and "--shape" in err and "example:cnn" in err


def test_k1_sizes_too_large_for_the_machine_are_refused_before_allocating(capsys):
    rc, err = _cli(["run", "example:cnn", "--shape", "N=1000000000000"], capsys)
    assert rc == 2 and "needs" in err and "bytes" in err and "example:cnn" in err
    rc, err = _cli(["run", "example:cnn", "--shape", f"N={2 ** 62}"], capsys)
    assert rc == 2 and "2**62 bytes" in err


def test_k1_memory_error_without_message_names_the_file(capsys, monkeypatch, tmp_path):
    import gradc.cli as cli

    def boom(path):
        raise MemoryError()

    monkeypatch.setattr(cli, "load_graph", boom)
    monkeypatch.chdir(tmp_path)  # the file exists: the command reaches load_graph
    (tmp_path / "some.onnx").write_bytes(b"")
    rc, err = _cli(["verify", "some.onnx"], capsys)
    assert rc == 2 and err.strip() == "gradc: error: some.onnx: out of memory"


def test_k1_no_partial_output_when_lowering_fails(tmp_path, capsys):
    path = tmp_path / "g.ir"
    path.write_text("graph g(%x: f32[2]) {\n  %y = relu(%x) : f32[2]\n  return %y\n}")
    out = tmp_path / "out.c"
    rc, err = _cli(["compile", str(path), "-t", "c", "-p", "no-such-pass", "-o", str(out)],
                   capsys)
    assert rc == 2 and not out.exists() and str(path) in err
    assert os.listdir(tmp_path) == ["g.ir"]


def test_errors_are_all_gradc_errors():
    for cls in (InputError, ParseError, ResourceError, UnsupportedError, VerifyError):
        assert issubclass(cls, GradcError)
    assert gradc.ResourceError is ResourceError


def test_onnx_session_of_a_graph_with_huge_static_values_is_made_at_the_first_call():
    # onnxruntime's optimizers do work that grows with such tensors (a graph of 40 GB values
    # took a minute to open); the call is refused before it is needed.
    g = gradc.Graph("g")
    g.output(ops.relu(g.input("x", "f32", [2 ** 40])), "y")
    ex = gradc.compile(g, target="onnx")
    assert ex._runner.session is None  # type: ignore[attr-defined]
    with pytest.raises(ResourceError, match=r"%\w+: f32\[1099511627776\] needs"):
        ex(x=np.broadcast_to(np.float32(1), (2 ** 40,)))
    small = gradc.Graph("s")
    small.output(ops.relu(small.input("x", "f32", [4])), "y")
    ex = gradc.compile(small, target="onnx")
    assert ex._runner.session is not None  # type: ignore[attr-defined]


# -- the exporters' shape subgraphs at import: nothing allocated by a declared shape ----------

def _shape_model(nodes, inits) -> bytes:
    from onnx import TensorProto, helper
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [1, 1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _i64(name, values):
    from onnx import numpy_helper
    return numpy_helper.from_array(np.array(values, np.int64), name)


def test_constant_of_shape_expand_and_range_of_huge_static_shapes_import_in_bounded_memory():
    from onnx import helper, numpy_helper
    one = numpy_helper.from_array(np.array([1.0], np.float32))
    r = isolated(f"""
        models = {{
            "cos": {_shape_model([helper.make_node("ConstantOfShape", ["s"], ["y"], value=one)],
                                 [_i64("s", [2, 7, 3, 2 ** 40])])!r},
            "expand": {_shape_model([helper.make_node("Expand", ["x", "s"], ["y"])],
                                    [_i64("s", [2 ** 32, 1])])!r},
            "range": {_shape_model([helper.make_node("Range", ["a", "b", "c"], ["r"]),
                                    helper.make_node("Cast", ["r"], ["y"], to=1)],
                                   [_i64("a", 0), _i64("b", 2 ** 40), _i64("c", 1)])!r},
        }}
        result = {{}}
        for k, m in models.items():
            try:
                result[k] = str(gradc.from_onnx(m).outputs[0].type)
            except gradc.GradcError as e:
                result[k] = type(e).__name__
    """)
    assert r["error"] is None, r
    assert r["result"] == {"cos": "f32[2,7,3,1099511627776]", "expand": "f32[4294967296,1]",
                           "range": "UnsupportedError"}, r
    assert r["seconds"] < 20


def test_a_large_static_expand_runs_on_every_target_as_onnxruntime():
    import onnxruntime as ort
    from onnx import helper
    m = _shape_model([helper.make_node("Expand", ["x", "s"], ["y"])], [_i64("s", [300, 300])])
    g = gradc.from_onnx(m)
    sizes = [n.attrs["value"].size for n in g.nodes if n.op == "constant"]
    assert max(sizes) == 1  # no 90,000-element constant: a run-time pad carries the shape
    x = np.full((1, 1), 2.5, np.float32)
    want = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for t in TARGETS:
        np.testing.assert_array_equal(gradc.compile(g, target=t)(x=x)["y"], want)


@pytest.mark.parametrize("name", ["inf_grad", "nan.1", "infinity", "nanx", "inf", "nan"])
def test_names_that_start_like_inf_or_nan_round_trip(name):
    """The lexer read ``inf`` of ``graph inf_grad(`` as a number (found by the fuzzer: a graph
    named "inf" differentiated)."""
    g = gradc.Graph(name)
    x = g.input("x", "f32", [name, 2])
    g.output(ops.relu(x), "y")
    assert gradc.parse(str(g)) == g
    t = gradc.grad(g)
    assert gradc.parse(str(t)) == t


def _symbol_arith_model(op: str, k: int) -> bytes:
    from onnx import TensorProto, helper, numpy_helper
    nodes = [helper.make_node("Shape", ["X"], ["s"]),
             helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
             helper.make_node(op, ["n", "k"], ["n2"]),
             helper.make_node("Unsqueeze", ["n2", "ax"], ["u"]),
             helper.make_node("Concat", ["u", "m1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["X", "shape"], ["Y"])]
    inits = [numpy_helper.from_array(np.array(v, np.int64), name) for name, v in
             (("i0", 0), ("k", k), ("ax", [0]), ("m1", [-1]))]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT,
                                                                     ["N", 4])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


@pytest.mark.parametrize("op,k", [("Mul", 2), ("Mul", 2 ** 40), ("Add", 1), ("Equal", 2)])
def test_shape_arithmetic_on_a_symbol_is_refused_not_folded_as_text(op, k):
    """The fuzzer found Mul(N, 2) folded to the symbol 'NN' and Mul(N, 2**40) building a
    2**40-character name (NumPy applies str's * to object arrays)."""
    with pytest.raises(UnsupportedError, match="depends on the symbolic dim 'N'"):
        gradc.from_onnx(_symbol_arith_model(op, k))


def test_pow_without_its_exponent_is_a_gradc_error():
    from onnx import TensorProto, helper
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Pow", ["X"], ["Y"])], "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])]),
        opset_imports=[helper.make_opsetid("", 13)])
    # a malformed node (Pow has two required inputs): a VerifyError from the importer's schema
    # check, as every node with an input count its ONNX schema does not allow
    with pytest.raises(VerifyError, match="Pow node #0 .output 'Y'.: input Y: expected a value "
                       r"\(required input\), got none"):
        gradc.from_onnx(m.SerializeToString())


@pytest.mark.parametrize("op", ["reduce_max_grad", "reduce_min_grad"])
@pytest.mark.parametrize("target", TARGETS)
def test_reduce_extreme_grad_of_a_rank_0_input_keeps_rank_0(op, target):
    """The fuzzer found a (1,) result (np.ascontiguousarray makes 0-d arrays 1-d): an internal
    error on the reference, a wrong shape on numpy, an invalid ONNX model."""
    g = gradc.parse(f"""graph g(%x: f32[], %dy: f32[]) {{
  %dx = {op}(%x, %dy) {{axes = [], keepdims = false}} : f32[]
  return %dx
}}""")
    dx = gradc.compile(g, target=target)(x=np.array(np.float32(1)), dy=np.array(np.float32(2)))
    assert dx["dx"].shape == () and dx["dx"] == 2


def test_average_pooling_grad_onnx_export_never_builds_a_divisor_table_per_position():
    """The fuzzer found to_onnx looping over 2**32 windows (a divisor table sized by the
    tensor): now one vector per axis, refused beyond 2**16 windows on an axis."""
    r = isolated("""
        big = "f32[1,1,4294967296,2]"
        g = gradc.parse(f'''graph g(%dy: f32[1,1,4294967295,1]) {{
          %dx = average_pooling_grad(%dy) {{output_sizes = [1, 1, 4294967296, 2],
                                            window_size = [2, 2]}} : {big}
          return %dx
        }}''')
        gradc.to_onnx(g)
    """, timeout=60)
    assert r["error"] and r["error"].startswith("UnsupportedError") and r["seconds"] < 10, r


@pytest.mark.parametrize("target", ["reference", "numpy", "c"])
def test_f4_float16_results_that_overflow_are_inf_without_warnings(target):
    """The fuzzer found RuntimeWarnings from the final rounding of gemm, batch normalization
    and average pooling references (float16 results beyond 65504 are inf, silently)."""
    g = gradc.parse("""graph g(%a: f16[1,1], %b: f16[1,1], %x: f16[2,1,1,1], %s: f16[1,1,1,1]) {
  %y = gemm(%a, %b) : f16[1,1]
  %z, %m, %v = batch_normalization_training(%x, %s, %s) : f16[2,1,1,1], f16[1,1,1,1], f16[1,1,1,1]
  %p = average_pooling(%x) {window_size = [1, 1]} : f16[2,1,1,1]
  return %y, %z, %p
}""")
    feeds = dict(a=np.full((1, 1), 300, np.float16), b=np.full((1, 1), 300, np.float16),
                 x=np.array([-1, 1], np.float16).reshape(2, 1, 1, 1),
                 s=np.full((1, 1, 1, 1), 60000, np.float16))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = gradc.compile(g, target=target)(**feeds)
    assert out["y"][0, 0] == np.inf and out["z"][1, 0, 0, 0] == np.inf


@pytest.mark.parametrize("attrs, field", [({"strides": [0, 1]}, "strides"),
                                          ({"dilations": [1, 0]}, "dilations")])
def test_conv_same_padding_with_a_zero_stride_or_dilation_is_refused(attrs, field):
    """Fuzz finding (onnx harness): Conv with auto_pad SAME and a zero stride divided by zero
    while computing the pads (ZeroDivisionError), before the op's own check."""
    from onnx import TensorProto as TP, helper as oh, numpy_helper as nh
    node = oh.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", **attrs)
    g = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", TP.FLOAT, [1, 1, 5, 5])],
                      [oh.make_tensor_value_info("y", TP.FLOAT, None)],
                      [nh.from_array(np.ones((2, 1, 3, 3), np.float32), "w")])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    with pytest.raises(gradc.VerifyError, match=f"attribute {field}: expected ints >= 1"):
        gradc.from_onnx(m)


# -- issue 25: sizes past what a target can address -----------------------------------------

def _sized_graph() -> gradc.Graph:
    """A symbolic batch through kernels that size buffers, offsets and loops from it."""
    g = gradc.Graph("sized")
    x = g.input("x", "float32", ("N", 2, 4, 4))
    w = g.parameter("w", np.ones((3, 2, 3, 3), np.float32))
    h = ops.relu(ops.convolution(x, w, None, start_padding=(1, 1), end_padding=(1, 1)))
    p = ops.reshape(ops.max_pooling(h, (2, 2), (2, 2)), ("N", 12))
    g.output(ops.reduce_sum(ops.gemm(p, ops.constant(np.ones((12, 2), np.float32)))), "y")
    return g


@pytest.mark.parametrize("n", [2 ** 31, 2 ** 62, 2 ** 63 - 1])
@pytest.mark.parametrize("target", TARGETS)
def test_symbols_bound_beyond_what_a_target_addresses_are_a_resource_error(monkeypatch, target,
                                                                             n):
    """`compile(shapes=...)` and `artifact` with N = 2**31 (fits: compiles, and a call is
    refused for memory), 2**62 and 2**63 - 1 (no target addresses that: refused before any
    size is computed, where the C target's arena planning raised OverflowError)."""
    import gradc.executable as executable
    from gradc.api import artifact
    g = gradc.grad(_sized_graph(), "all")
    if n > 2 ** 40:
        for make in (lambda: gradc.compile(g, target=target, shapes={"N": n}),
                     lambda: artifact(g, target, shapes={"N": n})):
            with pytest.raises(ResourceError, match=rf"value %x: f32\[N,2,4,4\] with N={n} is"):
                make()
        return
    if target == "c":  # the program for N = 2**31 is valid C; building it is another test's
        assert "gradc_entry" in artifact(g, "c", shapes={"N": n})
        return
    ex = gradc.compile(g, target=target, shapes={"N": n})
    monkeypatch.setattr(executable, "memory_limit", lambda: 2 ** 30)  # any machine's memory
    x = np.broadcast_to(np.ones((1, 2, 4, 4), np.float32), (n, 2, 4, 4))  # no memory
    cot = np.float32(1.0)
    with pytest.raises(ResourceError, match=r"value %\S+: f32\[N,.*needs \d+ bytes"):
        ex(x=x, grad_y=cot)


@pytest.mark.parametrize("target", ["reference", "numpy", "onnx"])
def test_values_past_2_62_bytes_at_call_time_are_a_resource_error(target):
    """Sizes that follow from the arrays of a call (f32[N,N] from two N-vectors): the same
    class at call time, before any allocation or int64 product. (The check is the
    Executable's, shared by every target; the C target wants C-contiguous arrays, which a
    zero-stride view of 2**32 rows is not, and 16 GiB of real rows is too much for a test.)"""
    g = gradc.Graph("g")
    x = g.input("x", "f32", ["N", 1])
    y = g.input("y", "f32", [1, "N"])
    g.output(ops.add(x, y), "z")
    big = np.broadcast_to(np.ones((1, 1), np.float32), (2 ** 32, 1))
    with pytest.raises(ResourceError, match=r"%z: f32\[N,N\] with N=4294967296 is"):
        gradc.compile(g, target=target)(x=big, y=big.T)


def test_values_totalling_past_2_62_bytes_are_a_resource_error_and_the_arena_checks_too():
    """Each value fits 2**62 bytes, all of them together do not: the C target's arena (the
    offsets of values live at once, int64) overflowed in plan_arena; the driver refuses such a
    graph on every target, and plan_arena checks its total before computing an offset."""
    from gradc.backends.c.emit import plan_arena
    g = gradc.Graph("static")
    x = g.input("x", "float32", (2 ** 60,))  # 2**62 bytes
    a = ops.relu(x)
    g.output(ops.add(ops.mul(a, ops.neg(a)), a), "y")
    for target in TARGETS:
        with pytest.raises(ResourceError, match=r"values total .* more than the 2\*\*62 bytes"):
            gradc.compile(g, target=target, passes=None)
    with pytest.raises(ResourceError, match=r"arena of 3 intermediate values may need"):
        plan_arena({"b0": (0, 2, 2 ** 62), "b1": (1, 3, 2 ** 62), "b2": (2, 4, 64)})
    assert plan_arena({"b0": (0, 2, 2 ** 61), "b1": (1, 3, 2 ** 61)})[1] == 2 ** 62


def test_cli_compile_with_a_shape_past_2_62_bytes_exits_2_and_writes_nothing(tmp_path, capsys):
    for target, name in (("c", "x.c"), ("numpy", "x.py"), ("onnx", "x.onnx")):
        out = tmp_path / name
        rc, err = _cli(["compile", "example:cnn", "-t", target, "--shape", f"N={2 ** 62}",
                        "-o", str(out)], capsys)
        assert rc == 2 and "value %x" in err and "2**62 bytes" in err, err
        assert not out.exists()
