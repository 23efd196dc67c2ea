"""The cuda target's host-side plumbing, run in CI through the mock driver (``runtime="host"``).

The arena, the copies into and out of it, the graph captured once and replayed, in-place
updates, outputs kept on the device and passed back without a copy, GPU arrays as inputs
(DLPack, ``__cuda_array_interface__``), per-shape programs for symbolic graphs, a
``Trainer(target="cuda")`` against the C target's, the host harness's barriers, the command
line's ``-t cuda``, and the errors without a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.backends.cuda import arrays, emit, host, rt
from gradc.backends.cuda.arrays import DeviceArray
from gradc.backends.cuda.prelude import PRELUDE
from gradc.errors import InputError, UnsupportedError

from cuda_cases import tiny_cnn
from helpers import assert_bits, compile_for, cuda_targets

HOST = "cuda-host" in cuda_targets()
needs_host = pytest.mark.skipif(not HOST, reason="the host harness is not among the targets")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cuda-cache"))


def _sgd_graph() -> gradc.Graph:
    """w.next = w - 0.5 * g, and a loss-like sum: a step whose state can stay on the device."""
    g = gradc.Graph("step")
    w, grad = g.input("w", "float32", (3, 4)), g.input("g", "float32", (3, 4))
    g.output(ops.sub(w, ops.mul(grad, ops.constant(np.float32(0.5)))), "w.next")
    g.output(ops.reduce_sum(ops.mul(w, w)), "loss")
    return g


@needs_host
def test_calls_reuse_the_arena_and_replay_one_captured_graph(cache):
    ex = gradc.compile(_sgd_graph(), target="cuda", runtime="host", cache_dir=cache)
    runner = ex._runner
    assert isinstance(ex.arena_bytes, int) and ex.arena_bytes >= 2 * 48
    rng = np.random.default_rng(0)
    for _ in range(3):
        w, g = rng.standard_normal((2, 3, 4), dtype=np.float32)
        out = ex(w=w, g=g)
        assert_bits(out["w.next"], w - g * np.float32(0.5))
        assert_bits(out["loss"], np.cumsum((w * w).reshape(-1), dtype=np.float32)[-1])
    graph = runner.graph
    assert graph is not None and len(graph) == len(runner.program.launches)
    assert runner.driver.launches == 3 * len(graph)


@pytest.mark.parametrize("target", cuda_targets())
def test_state_stays_on_the_device_and_comes_back_without_a_copy(target, cache):
    ex = compile_for(_sgd_graph(), target, cache_dir=cache, update_in_place={"w.next": "w"},
                     keep_on_device=["w.next"])
    assert ex.in_place == {"w.next": "w"}
    w0 = np.arange(12, dtype=np.float32).reshape(3, 4)
    g = np.full((3, 4), 2.0, np.float32)
    first = ex(w=w0, g=g)["w.next"]
    assert isinstance(first, DeviceArray) and first.shape == (3, 4)
    runner = ex._runner
    uploads: list[int] = []
    upload = runner.driver.upload
    runner.driver.upload = lambda dst, src: (uploads.append(src.nbytes), upload(dst, src))[1]
    state = first
    for _ in range(3):
        out = ex(w=state, g=g)
        assert out["w.next"] is state  # the same slot, the same object
    assert uploads == [48] * 3  # only g: the state was never uploaded again
    assert_bits(np.asarray(state), w0 - 4 * np.float32(0.5) * g)
    assert_bits(w0, np.arange(12, dtype=np.float32).reshape(3, 4))  # the host array is intact


@pytest.mark.parametrize("target", cuda_targets())
def test_device_arrays_of_the_arena_are_staged_before_slots_change(target, cache):
    """Outputs passed back crosswise (each to the other's input slot) read the old values."""
    g = gradc.Graph("swap")
    a, b = g.input("a", "float32", (5,)), g.input("b", "float32", (5,))
    g.output(ops.neg(b), "a.next")
    g.output(ops.neg(a), "b.next")
    ex = compile_for(g, target, cache_dir=cache, keep_on_device=["a.next", "b.next"],
                     update_in_place={"a.next": "a", "b.next": "b"})
    x, y = np.arange(5, dtype=np.float32), -np.arange(5, 10, dtype=np.float32)
    out = ex(a=x, b=y)
    for _ in range(2):  # each in its own slot (remembered by the runner): nothing copied
        out = ex(a=out["a.next"], b=out["b.next"])  # a <- -b, b <- -a
    assert_bits(np.asarray(out["a.next"]), -y)
    out2 = ex(a=out["b.next"], b=out["a.next"])  # then crosswise: a <- -x, b <- -y
    assert_bits(np.asarray(out2["a.next"]), y)
    assert_bits(np.asarray(out2["b.next"]), x)
    out3 = ex(a=out2["a.next"], b=out2["b.next"])  # and in their own slots again
    assert_bits(np.asarray(out3["a.next"]), -x)
    assert_bits(np.asarray(out3["b.next"]), -y)


@needs_host
def test_device_arrays_passed_back_skip_the_checks_only_when_they_match(cache, monkeypatch):
    """A call whose arrays match the static signature takes the target's own DeviceArrays as
    they are (a Trainer passes back its whole state each step: no per-array description); one
    of another shape or dtype still gets the checks' message."""
    ex = gradc.compile(_sgd_graph(), target="cuda", runtime="host", cache_dir=cache,
                       update_in_place={"w.next": "w"}, keep_on_device=["w.next", "loss"])
    g = np.ones((3, 4), np.float32)
    state = ex(w=np.zeros((3, 4), np.float32), g=g)["w.next"]
    described: list[object] = []
    monkeypatch.setattr(ex, "_foreign", lambda a: described.append(a) or arrays.describe(a, True))
    ex(w=state, g=g)
    assert described == []
    loss = ex(w=state, g=g)["loss"]  # f32[] on the device: the wrong shape for w
    with pytest.raises(InputError, match=r"input 'w': expected shape \(3, 4\), got \(\) "):
        ex(w=loss, g=g)
    assert described == [loss]
    with pytest.raises(AttributeError):  # read-only: the object checked once stays as checked
        state.shape = ()  # type: ignore[misc]
    assert_bits(np.asarray(state), np.full((3, 4), -1.5, np.float32))
    # another library's array beside the state (a training batch on the GPU): described
    # alone, the state still passes as it is
    described.clear()
    batch = _CpuDLPack(g)
    ex(w=state, g=batch)
    assert described == [batch]
    with pytest.raises(InputError, match=r"input 'g': expected shape \(3, 4\), got \(4, 3\)"):
        ex(w=state, g=_CpuDLPack(np.ones((4, 3), np.float32)))
    assert_bits(np.asarray(state), np.full((3, 4), -2.0, np.float32))


class _CpuDLPack:
    """An array that offers only DLPack (on the CPU: the harness's "device" is host memory)."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


@needs_host
def test_dlpack_and_cuda_array_interface_inputs(cache):
    g = gradc.Graph("t")
    x = g.input("x", "float32", (2, 3))
    g.output(ops.relu(x), "y")
    ex = gradc.compile(g, target="cuda", runtime="host", cache_dir=cache)
    x0 = np.array([[-1, 2, -0.0], [4, -5, 6]], np.float32)
    assert_bits(ex(x=_CpuDLPack(x0))["y"], np.maximum(x0, 0) + 0)
    with pytest.raises(InputError, match="C-contiguous"):
        ex(x=_CpuDLPack(np.asfortranarray(x0)))
    with pytest.raises(InputError, match="dtype float32"):
        ex(x=_CpuDLPack(x0.astype(np.float64)))
    with pytest.raises(InputError, match="numpy.ndarray or a GPU array, got list"):
        ex(x=[[1.0] * 3] * 2)
    d = arrays.describe(_CpuDLPack(x0), host=True)
    assert d is not None and d.ptr == x0.ctypes.data and d.shape == (2, 3)

    class Cai:  # a GPU array by its interface (strided: transposed bytes)
        __cuda_array_interface__ = {"shape": (3, 2), "typestr": "<f4", "data": (4096, False),
                                    "strides": (4, 12), "version": 3}
    c = arrays.describe(Cai())
    assert c is not None and c.ptr == 4096 and c.dtype == np.float32
    assert not c.flags.c_contiguous and arrays.describe(Cai(), host=True) is None


@pytest.mark.parametrize("target", cuda_targets())
def test_symbolic_graphs_get_a_program_per_shape(target, cache):
    g = gradc.Graph("t")
    x = g.input("x", "float32", ("N", 4))
    g.output(ops.reduce_sum(ops.relu(x), (1,)), "s")
    ex = compile_for(g, target, cache_dir=cache)
    for n in (1, 3, 1):
        v = np.random.default_rng(n).standard_normal((n, 4), dtype=np.float32)
        want = gradc.compile(g, target="reference")(x=v)["s"]
        assert_bits(ex(x=v)["s"], want)
    assert len(ex._runner.runners) == 2


@pytest.mark.skipif("cuda" not in cuda_targets(), reason="needs the GPU (GRADC_TEST_CUDA)")
def test_torch_cuda_tensors_in_and_device_arrays_out(cache):
    """GPU arrays of another library are read where they lie, and an output kept on the
    device is read by that library without a host copy."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    g = gradc.Graph("t")
    g.output(ops.relu(g.input("x", "float32", (64, 8))), "y")
    ex = gradc.compile(g, target="cuda", cache_dir=cache, keep_on_device=["y"])
    x = torch.randn(64, 8, device="cuda")
    y = ex(x=x)["y"]
    assert torch.equal(torch.as_tensor(y, device="cuda"), torch.relu(x))
    with pytest.raises(InputError, match="C-contiguous"):
        ex(x=x.t().contiguous().t())
    assert np.array_equal(np.asarray(ex(x=x.cpu().numpy())["y"]), torch.relu(x).cpu().numpy())


@pytest.mark.parametrize("target", cuda_targets())
def test_trainer_on_cuda_equals_the_c_target(target, cache):
    opt = gradc.optim.Adam(0.05)
    extra = {"runtime": "host"} if target == "cuda-host" else {}
    tc = gradc.Trainer(tiny_cnn(), opt, loss="cross_entropy", target="c")
    tg = gradc.Trainer(tiny_cnn(), opt, loss="cross_entropy", target="cuda", cache_dir=cache,
                       **extra)
    rng = np.random.default_rng(1)
    for step in range(3):
        batch = {"x": rng.standard_normal((4, 3, 6, 6), dtype=np.float32),
                 "labels": rng.integers(0, 5, 4)}
        lc, lg = tc.step(**batch), tg.step(**batch)
        if target == "cuda-host":
            assert lc == lg
        else:  # the GPU's exp (Adam's bias correction, softmax) is within an ulp of glibc's
            assert abs(lc - lg) <= 1e-6 * abs(lc)
        if step:
            assert tg.last_step_bytes["allocated"] == 0 and tg.last_step_bytes["in_place"] > 0
    # the state replaced between steps (host arrays, no longer the arena's views): both
    # trainers resume from it alike, and the step after takes the new views as they are
    tc.load_state_dict(tc.state_dict())
    tg.load_state_dict(tg.state_dict())
    for step in range(2):
        batch = {"x": rng.standard_normal((4, 3, 6, 6), dtype=np.float32),
                 "labels": rng.integers(0, 5, 4)}
        lc, lg = tc.step(**batch), tg.step(**batch)
        assert lc == lg if target == "cuda-host" else abs(lc - lg) <= 1e-6 * abs(lc)
        moved = tg.last_step_bytes
        assert (moved["allocated"] > 0) == (step == 0) and moved["in_place"] + moved[
            "allocated"] == sum(a.nbytes for a in tc.state_dict().values()) - 8  # (no "step")
    for name, want in tc.state_dict().items():
        got = tg.state_dict()[name]
        if target == "cuda-host":
            assert_bits(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert all(type(a) is np.ndarray for a in tg.parameters.values())


@needs_host
@pytest.mark.parametrize("cxx", ["c++", "c++ -DGC_HOST_UCONTEXT"], ids=["switch", "ucontext"])
def test_barriers_hold_in_the_host_harness(cxx, cache):
    """A block-wide tree sum over shared memory: correct only if no thread passes a
    __syncthreads before all have reached it (the harness runs such kernels as fibers: its own
    stack switch on x86-64, ucontext elsewhere); the same kernel run as a plain loop over
    threads gives another result."""
    source = PRELUDE + """
GC_KERNEL k0(char *__restrict__ gc_arena) {
  __shared__ int64_t tile[256];
  const int64_t *x = (const int64_t *)gc_arena;
  int64_t *y = (int64_t *)(gc_arena + 8192);
  const unsigned int t = threadIdx.x;
  tile[t] = x[blockIdx.x * 256 + t];
  __syncthreads();
  for (unsigned int s = 128; s > 0; s >>= 1) {
    if (t < s) tile[t] = tile[t] * 3 + tile[t + s];
    __syncthreads();
  }
  if (t == 0) y[blockIdx.x] = tile[0];
}
"""
    want = np.arange(1024, dtype=np.int64).reshape(4, 256)
    for s in (128, 64, 32, 16, 8, 4, 2, 1):
        want = np.concatenate([want[:, :s] * 3 + want[:, s:2 * s], want[:, 2 * s:]], axis=1)
    for fibers, ok in ((True, True), (False, False)):
        d = host.HostDriver(cxx, cache)
        fn = d.function(d.load(source, ["k0"]), "k0")
        arena = d.alloc(8192 + 32)
        d.upload(arena, np.arange(1024, dtype=np.int64))
        d.replay(d.capture([(fn, 4, 256, fibers)], arena))
        got = np.empty(4, np.int64)
        d.download(got, arena + 8192)
        assert np.array_equal(got, want[:, 0]) == ok


def test_cli_writes_cuda_source_without_a_gpu(tmp_path):
    from gradc.cli import main
    g = gradc.Graph("t")
    x = g.input("x", "float32", ("N", 4))
    g.output(ops.relu(x), "y")
    text = tmp_path / "t.gradc"
    text.write_text(str(g))
    out = tmp_path / "step.cu"
    assert main(["compile", str(text), "-t", "cuda", "--shape", "N=3", "-o", str(out)]) == 0
    body = out.read_text()
    assert "GC_KERNEL k0(char *__restrict__ gc_arena)" in body and "float32[3,4]" in body
    assert main(["compile", str(text), "-t", "cuda", "-o", str(tmp_path / "x.cu")]) == 2
    assert not (tmp_path / "x.cu").exists()


def test_without_a_gpu_compile_says_what_is_missing():
    try:
        rt.DeviceDriver(lambda s, a: b"", 0)
    except UnsupportedError as e:
        g = gradc.Graph("t")
        g.output(ops.neg(g.input("x", "float32", (2,))), "y")
        with pytest.raises(UnsupportedError, match="cuda target: expected (the cuda-bindings|an "
                                                   "NVIDIA GPU)") as info:
            gradc.compile(g, target="cuda")
        assert str(info.value) == str(e)
    else:
        pytest.skip("a GPU is present")


@needs_host
def test_options_are_checked(cache, monkeypatch):
    g = gradc.Graph("t")
    g.output(ops.neg(g.input("x", "float32", (2,))), "y")
    with pytest.raises(gradc.GradcError, match="runtime: expected 'device' or 'host'"):
        gradc.compile(g, target="cuda", runtime="gpu")
    with pytest.raises(gradc.GradcError, match="unknown option threads"):
        gradc.compile(g, target="cuda", runtime="host", threads=2)
    with pytest.raises(gradc.GradcError, match="keep_on_device: expected a collection"):
        gradc.compile(g, target="cuda", runtime="host", keep_on_device="y")
    monkeypatch.delitem(emit.EMITTERS, "gemm")  # an op without a CUDA lowering (none may be left)
    with pytest.raises(UnsupportedError, match="cuda target: expected operators with a CUDA "
                                               "lowering, got gemm"):
        h = gradc.Graph("m")
        a = h.input("a", "float32", (2, 2))
        h.output(ops.gemm(a, a), "y")
        gradc.compile(h, target="cuda", runtime="host", cache_dir=cache)
