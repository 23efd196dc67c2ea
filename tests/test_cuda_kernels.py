"""The cuda target's kernels on the CPU through the host harness, bit for bit with the reference.

Every case of ``cuda_cases.py`` is optimized (so the anchored gradients run as fused groups
with a prologue and an epilogue), lowered by the cuda target with ``runtime="host"`` -- the
generated kernels compiled as C++ with ``-ffp-contract=off`` and run over their whole grid --
and compared with the reference target: the same bits, NaN payloads of sums aside (SPEC.md
§1.6). Together with ``test_cuda_nvrtc.py`` (NVRTC compiles the same sources) this is how CI
checks the target without a GPU; ``benchmarks/gpu_smoke.sh`` runs the cases on the GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

import gradc
from gradc.backends.cuda.emit import EMITTERS
from gradc.backends.c.scalar import SCALAR

from cuda_cases import CASES, GELU, SUMMED, TRANSCENDENTAL, gelu_bound
from helpers import assert_bits, compile_for, cuda_targets
from test_elementwise_math_support import assert_ulps, ulps

pytestmark = pytest.mark.skipif(not cuda_targets(), reason="no C++ compiler for the harness")


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("target", cuda_targets())
def test_case_matches_the_reference_bit_for_bit(name, target, tmp_path_factory):
    g, feeds = CASES[name]()
    want = gradc.compile(g, target="reference")(**feeds)
    got = compile_for(g, target, cache_dir=str(tmp_path_factory.getbasetemp() / "cache"))(
        **feeds)
    assert set(got) == set(want)
    for k in want:
        if k in TRANSCENDENTAL:
            assert_ulps(np.asarray(got[k]), want[k], ulps(want[k].dtype))
        elif k in GELU:
            x, dy = (feeds[f] if f else None for f in GELU[k])
            assert_within(np.asarray(got[k]), want[k], gelu_bound(want[k], x, dy))
        else:
            assert_bits(np.asarray(got[k]), want[k], nan_payload=k not in SUMMED)


def assert_within(got: np.ndarray, want: np.ndarray, tol: np.ndarray) -> None:
    """NaN where the reference has NaN, infinities equal, other elements within ``tol``."""
    nan, inf = np.isnan(want), np.isinf(want)
    assert (np.isnan(got) == nan).all() and (got[inf] == want[inf]).all(), (got, want)
    fin = ~nan & ~inf
    err = np.abs(got[fin].astype(np.float64) - want[fin].astype(np.float64))
    assert (err <= tol[fin]).all(), (got[fin][err > tol[fin]], want[fin][err > tol[fin]])


def test_cases_cover_every_kernel_family():
    """Each non-element-wise op of the target appears in some case (element-wise ops run in
    the element-wise math tests, through the shared target list)."""
    seen: set[str] = set()

    def walk(g: gradc.Graph) -> None:
        for n in g.nodes:
            seen.add(n.op)
            if n.body is not None:
                walk(n.body)

    for make in CASES.values():
        walk(gradc.optimize(make()[0]).graph)
    assert set(EMITTERS) - set(SCALAR) <= seen, sorted(set(EMITTERS) - set(SCALAR) - seen)
    assert {"fused"} <= seen


def test_the_smoke_scripts_comparison_accepts_the_harness(tmp_path, capsys):
    """benchmarks/cuda_smoke.py judges the GPU's results; on the harness's (the reference's
    bits, softmax within ulps) it must say bit-exact. Its first version compared log_softmax's
    -inf through np.spacing (NaN) and reported every reductions case as a MISMATCH."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import cuda_smoke

    for name in ("reductions_float16", "reductions_float32", "reductions_float64"):
        assert cuda_smoke.run_case(name, str(tmp_path), 1, runtime="host"), name
    assert "MISMATCH" not in capsys.readouterr().out


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_softmax_rows_equal_the_thread_per_group_kernel_bit_for_bit(dtype, tmp_path,
                                                                    monkeypatch):
    """softmax/log_softmax of long groups run a block per group (a tree selects the maximum,
    thread 0 adds each chunk of exponentials in order): the same bits, NaN payloads included,
    as the thread-per-group kernel that adds them all in one thread."""
    from cuda_cases import softmax_rows
    from gradc.backends.cuda import reduce

    g, feeds = softmax_rows(dtype)()
    rows = compile_for(g, "cuda-host", cache_dir=str(tmp_path))(**feeds)
    assert "gc_buf" in compile_for(g, "cuda-host", cache_dir=str(tmp_path)).source
    monkeypatch.setattr(reduce, "ROW_MEMBERS", 1 << 40)
    serial = compile_for(g, "cuda-host", cache_dir=str(tmp_path))
    assert "gc_buf" not in serial.source
    for k, want in serial(**feeds).items():
        assert_bits(np.asarray(rows[k]), want, nan_payload=True)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_normalization_rows_equal_the_thread_per_group_kernel_bit_for_bit(dtype, tmp_path,
                                                                          monkeypatch):
    """mean_variance_normalization and its gradient over long groups run a block per group
    (the row in shared memory, thread 0 adding each sum in order): the same bits, NaN payloads
    included, as the thread-per-group kernels."""
    from cuda_cases import normalization_rows
    from gradc.backends.cuda import normalization

    g, feeds = normalization_rows(dtype)()
    ex = compile_for(g, "cuda-host", cache_dir=str(tmp_path))
    assert ex.source.count("__shared__") >= 10  # every mvn and mvn_grad node in rows
    rows = ex(**feeds)
    monkeypatch.setattr(normalization, "ROW_MIN", 1 << 40)
    serial = compile_for(g, "cuda-host", cache_dir=str(tmp_path))
    assert "__shared__" not in serial.source
    for k, want in serial(**feeds).items():
        assert_bits(np.asarray(rows[k]), want, nan_payload=True)
