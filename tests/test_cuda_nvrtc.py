"""NVRTC compiles every kernel the cuda target emits, in CI, without a GPU or a driver.

Each case of ``cuda_cases.py`` (every kernel family and dtype) and a graph of every element-wise
op on every dtype is lowered to CUDA and compiled by NVRTC for ``sm_90`` with the target's own
options (``build.compile_cubin``: no FMA contraction, no flush to zero, IEEE division and
square root) into a CUBIN. Skipped where ``cuda-bindings`` or ``nvidia-cuda-nvrtc`` is missing
(``pip install 'gradc[cuda]'``; the test extra has both). The sources also keep the target's
determinism rule: no atomic operation appears in any of them.
"""

from __future__ import annotations

import pytest

import gradc
from gradc import ops
from gradc.backends.c.scalar import SCALAR
from gradc.backends.cuda import build, rt
from gradc.backends.cuda.emit import generate

from cuda_cases import CASES


def _cubin(graph: gradc.Graph, cache: str) -> bytes:
    source = generate(gradc.optimize(graph).graph, {}).source
    assert "atomic" not in source.lower()
    return build.compile_cubin(source, build.DEFAULT_ARCH, cache)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_case_compiles_to_a_cubin(name, nvrtc_cache):
    cubin = _cubin(CASES[name]()[0], nvrtc_cache)
    assert cubin[:4] == b"\x7fELF"


UNARY = ("relu", "neg", "identity", "sqrt", "exp", "log", "tanh", "sigmoid", "erf", "sin", "cos",
         "gelu")
FLOATS = ("float16", "float32", "float64")


def _all_elementwise(dtype: str) -> gradc.Graph:
    """Every element-wise op of the dtype, each an output of its own (not fused away)."""
    g = gradc.Graph(f"all_{dtype}")
    a, b = g.input("a", dtype, (3, 4)), g.input("b", dtype, (4,))
    c = g.input("c", "bool", (3, 1))
    outs = {"add": ops.add(a, b), "sub": ops.sub(a, b), "mul": ops.mul(a, b),
            "neg": ops.neg(a), "cast": ops.cast(a, "float16" if dtype != "float16" else "int32"),
            "where": ops.where(c, a, b), "gt": ops.greater(a, b), "le": ops.less_equal(a, b),
            "mx": ops.maximum(a, b), "mn": ops.minimum(a, b), "eq": ops.equal(a, b),
            "lt": ops.less(a, b), "ge": ops.greater_equal(a, b), "ex": ops.expand(b, a)}
    if dtype in FLOATS:
        outs |= {op: getattr(ops, op)(a) for op in UNARY}
        outs |= {"div": ops.div(a, b), "pow": ops.pow(a, 3.0), "lr": ops.leaky_relu(a, 0.2),
                 "clip": ops.clip(a, -1.0, 2.0), "cg": ops.clip_grad(a, ops.neg(a), -1.0, 2.0),
                 "rg": ops.relu_grad(a, ops.neg(a)), "isnan": ops.is_nan(a),
                 "gelu_t": ops.gelu(a, "tanh"), "gg": ops.gelu_grad(a, ops.neg(a)),
                 "gg_t": ops.gelu_grad(a, ops.neg(a), "tanh")}
    else:
        outs |= {"clip": ops.clip(a, 0, 9), "cf": ops.cast(a, "float64")}
    for k, v in outs.items():
        g.output(v, k)
    return g


@pytest.mark.parametrize("dtype", FLOATS + ("int8", "uint8", "int16", "uint16", "int32",
                                            "uint32", "int64", "uint64"))
def test_every_elementwise_op_compiles(dtype, nvrtc_cache):
    g = _all_elementwise(dtype)
    cubin = _cubin(g, nvrtc_cache)
    assert cubin[:4] == b"\x7fELF"


def test_the_element_wise_graphs_cover_every_scalar_op():
    seen = {n.op for d in FLOATS + ("int32",) for n in _all_elementwise(d).nodes}
    assert set(SCALAR) <= seen | {"constant"}, sorted(set(SCALAR) - seen)


def test_a_broken_source_is_a_gradc_error_with_nvrtc_s_log(nvrtc_cache):
    with pytest.raises(gradc.GradcError, match="(?s)NVRTC failed.*undefined"):
        build.compile_cubin("GC_KERNEL_UNDEFINED k0(void) {}", build.DEFAULT_ARCH, nvrtc_cache)


def test_every_driver_name_rt_uses_exists_in_cuda_bindings():
    """``rt.py`` runs only on a GPU: at least every function, enum and member it names must
    exist in the installed ``cuda.bindings.driver`` (a typo would show only on the GPU)."""
    import re
    from pathlib import Path

    driver = pytest.importorskip("cuda.bindings.driver")
    text = Path(rt.__file__).read_text()
    names = set(re.findall(r"\bd\.(cu\w+|CU\w+)(?:\.(\w+))?", text))
    assert len(names) > 20
    for name, member in sorted(names):
        assert hasattr(driver, name), name
        if member and name[:2] == "CU":
            assert hasattr(getattr(driver, name), member), f"{name}.{member}"
    assert int(driver.CUdeviceptr(4096)) == 4096
