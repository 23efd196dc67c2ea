"""The cuda target's transformer kernels (SPEC-transformers.md §24, §26) beyond the spec's vectors
(those run in test_normalization.py and test_gather.py with the cuda modes among the targets):
random layouts bit for bit with the reference, many cases per build (a build of the host
harness takes about a second); the index check of §26.3 on the cuda runtime -- the message, the
first bad index of the first failing check, nothing written in place by a call that raises, a
``Trainer(target="cuda")`` whose state and step counter survive a bad batch -- and the
generated program's guards (every launch after the first check stops on its error record).
"""

from __future__ import annotations

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.backends.cuda import index
from gradc.backends.cuda.emit import generate

from helpers import assert_bits, compile_for, cuda_targets

pytestmark = pytest.mark.skipif(not cuda_targets(), reason="no C++ compiler for the harness")
F32 = np.float32


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cuda-cache"))


def _agree(g: gradc.Graph, feeds: dict[str, np.ndarray], target: str, cache: str) -> None:
    want = gradc.compile(g, target="reference")(**feeds)
    got = compile_for(g, target, cache_dir=cache)(**feeds)
    for k in want:
        assert_bits(np.asarray(got[k]), want[k], nan_payload=False)


def _layout(rng: np.random.Generator) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """A random input shape, normalized axes and scale shape (lower rank, dims of 1)."""
    rank = int(rng.integers(1, 5))
    shape = tuple(int(d) for d in rng.integers(1, 6, rank))
    axes = tuple(sorted(int(a) for a in rng.choice(rank, int(rng.integers(1, rank + 1)),
                                                   replace=False)))
    lead = int(rng.integers(0, rank))
    sshape = tuple(d if rng.random() < 0.6 else 1 for d in shape[lead:])
    return shape, axes, sshape


@pytest.mark.parametrize("target", cuda_targets())
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_random_normalization_layouts_bit_for_bit(target, dtype, cache):
    """Twelve random layouts (axes anywhere, scale and bias of lower rank, each use_mean and
    use_variance), forward and gradient, in one graph."""
    rng = np.random.default_rng({"float16": 1, "float32": 2, "float64": 3}[dtype])
    g, feeds = gradc.Graph("mvn"), {}
    for c in range(12):
        shape, axes, sshape = _layout(rng)
        kw = dict(axes=axes, use_mean=bool(c & 1), use_variance=bool(c & 2))
        names = [f"x{c}", f"dy{c}", f"s{c}", f"b{c}"]
        x, dy, s, b = (g.input(n, dtype, sh) for n, sh in zip(names, (shape, shape, sshape,
                                                                        sshape)))
        feeds |= {n: (rng.standard_normal(sh) * 3 + rng.standard_normal()).astype(dtype)
                  for n, sh in zip(names, (shape, shape, sshape, sshape))}
        g.output(ops.mean_variance_normalization(x, s, b, **kw), f"y{c}")
        for k, v in zip("xsb", ops.mean_variance_normalization_grad(x, dy, s, **kw)):
            g.output(v, f"d{k}{c}")
    _agree(g, feeds, target, cache)


@pytest.mark.parametrize("target", cuda_targets())
def test_random_gathers_and_the_sort_thresholds(target, cache):
    """gather_grad with index counts around the scan limit (16, 17), a run (256, 257) and a
    merge level (513), few and many output rows, int32 and int64, axes 0..2; and gather."""
    rng = np.random.default_rng(4)
    g, feeds = gradc.Graph("ga"), {}
    for c, (count, size, axis, dtype) in enumerate([
            (1, 3, 0, "float32"), (16, 2, 1, "float16"), (17, 5, 0, "float64"),
            (256, 9, 2, "float32"), (257, 1, 0, "float32"), (513, 40, 1, "float16"),
            (300, 700, 0, "float32")]):
        out = [2, 3, 2]
        out[axis] = size
        ishape = (count,) if c % 2 else (count // 3, 3) if count % 3 == 0 else (count,)
        idt = "int32" if c % 2 else "int64"
        i = g.input(f"i{c}", idt, ishape)
        dshape = tuple(out[:axis]) + ishape + tuple(out[axis + 1:])
        dy = g.input(f"dy{c}", dtype, dshape)
        g.output(ops.gather_grad(dy, i, tuple(out), axis=axis), f"gg{c}")
        g.output(ops.gather(ops.gather_grad(dy, i, tuple(out), axis=axis), i, axis=axis),
                 f"ga{c}")
        feeds[f"i{c}"] = rng.integers(-size, size, ishape).astype(idt)
        feeds[f"dy{c}"] = (rng.standard_normal(dshape) * 1000).astype(dtype)
    _agree(g, feeds, target, cache)


# -- §26.3 on the cuda runtime ------------------------------------------------------------------
def embedding_model() -> gradc.Graph:
    """Token ids (4, 3) -> embedding E (6, 5) -> layer norm -> scores over 6 classes by
    broadcasting (no gemm) -> per-token logits."""
    rng = np.random.default_rng(0)
    g = gradc.Graph("tiny_lm")
    tok = g.input("tokens", "int64", (4, 3))
    e = g.parameter("E", rng.standard_normal((6, 5)).astype(F32))
    s = g.parameter("s", rng.standard_normal(5).astype(F32))
    b = g.parameter("b", rng.standard_normal(5).astype(F32))
    w = g.parameter("W", rng.standard_normal((6, 5)).astype(F32))
    h = ops.mean_variance_normalization(ops.gather(e, tok), s, b)
    g.output(ops.reduce_sum(ops.mul(ops.reshape(h, (12, 1, 5)), w), (2,)), "logits")
    return g


def _batch(i: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(10 + i)
    return {"tokens": rng.integers(-6, 6, (4, 3)), "labels": rng.integers(0, 6, 12)}


def _trainer(target: str, cache: str) -> gradc.Trainer:
    extra = {"runtime": "host"} if target == "cuda-host" else {}
    return gradc.Trainer(embedding_model(), gradc.optim.AdamW(0.05), loss="cross_entropy",
                         target="cuda", cache_dir=cache, **extra)


@pytest.mark.parametrize("target", cuda_targets())
def test_a_step_with_a_bad_token_changes_nothing(target, cache):
    """The state lives in the device arena, updated in place; a bad batch raises §26.3's
    message and leaves parameters, moments and the step counter as they were, and the trainer
    goes on exactly as one that never saw it (and as the C target)."""
    tr = _trainer(target, cache)
    tr.step(**_batch(0))
    before = tr.state_dict()
    bad = _batch(1)
    bad["tokens"][2, 1] = 6  # one past the vocabulary
    bad["tokens"][3, 0] = -7  # a later one: not reported
    with pytest.raises(gradc.InputError) as info:
        tr.step(**bad)
    assert str(info.value) == ("gather: indices[2, 1] = 6: expected an index in -6..5 "
                               "(input.shape[axis] = 6)")
    after = tr.state_dict()
    assert tr.steps == 1 and sorted(after) == sorted(before)
    for k, v in before.items():
        assert after[k].tobytes() == v.tobytes(), k
    tr.step(**_batch(2))
    ref = _trainer(target, cache)
    c = gradc.Trainer(embedding_model(), gradc.optim.AdamW(0.05), loss="cross_entropy",
                      target="c")
    for t in (ref, c):
        t.step(**_batch(0))
        t.step(**_batch(2))
    for k, v in ref.state_dict().items():
        assert tr.state_dict()[k].tobytes() == v.tobytes(), k
        if target == "cuda-host":  # the GPU's exp (softmax, Adam) is within an ulp of glibc's
            assert_bits(v, c.state_dict()[k])


def _in_place_graph() -> gradc.Graph:
    """p.next = p / 2 (in place; nothing of the gather's needed, so the plan's sinks would run
    it first) beside a gather at idx + 1."""
    g = gradc.Graph("order")
    p = g.input("p", "float32", (64,))
    table, idx = g.input("table", "float32", (5, 3)), g.input("idx", "int64", (4,))
    g.output(ops.mul(p, ops.constant(np.array(0.5, F32))), "p.next")
    g.output(ops.gather(table, ops.add(idx, ops.constant(np.array(1, np.int64)))), "y")
    return g


@pytest.mark.parametrize("target", cuda_targets())
def test_no_in_place_write_in_a_call_that_raises(target, cache):
    """The state passed back as the device array of its own slot (no copy) is halved by each
    good call and left as it was by a bad one."""
    extra = {"runtime": "host"} if target == "cuda-host" else {}
    ex = gradc.compile(_in_place_graph(), target="cuda", update_in_place={"p.next": "p"},
                       keep_on_device=["p.next"], cache_dir=cache, **extra)
    assert ex.in_place == {"p.next": "p"}
    table = np.arange(15, dtype=F32).reshape(5, 3)
    out = ex(p=np.arange(64, dtype=F32), table=table, idx=np.array([0, 1, 2, 3]))
    p = out["p.next"]
    assert_bits(np.asarray(p), np.arange(64, dtype=F32) * F32(0.5))
    assert_bits(out["y"], table[1:])
    with pytest.raises(gradc.InputError, match=r"^gather: indices\[3\] = 5: "):
        ex(p=p, table=table, idx=np.array([0, 1, 2, 4]))
    assert_bits(np.asarray(p), np.arange(64, dtype=F32) * F32(0.5))  # not halved again
    out = ex(p=p, table=table, idx=np.array([-6, 0, 1, 2]))  # the record is cleared
    assert out["p.next"] is p
    assert_bits(np.asarray(p), np.arange(64, dtype=F32) * F32(0.25))
    assert_bits(out["y"], table[[0, 1, 2, 3]])


def _two_checks() -> gradc.Graph:
    """A gather, then a gather_grad of its result at other indices."""
    g = gradc.Graph("two")
    x, i, j = g.input("x", "float32", (4, 2)), g.input("i", "int32", (3,)), \
        g.input("j", "int64", (2, 2))
    y = ops.gather(x, i)
    g.output(ops.gather_grad(ops.reshape(ops.slice(y, (0, 0), (2, 2), (1, 1)), (2, 2, 1)), j,
                             (7, 1), axis=0), "z")
    return g


@pytest.mark.parametrize("target", cuda_targets())
def test_the_first_failing_check_is_reported(target, cache):
    """Two checks: the first passes and the second fails, or both fail (the first's message;
    the second's check, after it, stops on the record)."""
    extra = {"runtime": "host"} if target == "cuda-host" else {}
    ex = gradc.compile(_two_checks(), target="cuda", cache_dir=cache, **extra)
    x0 = np.zeros((4, 2), F32)
    with pytest.raises(gradc.InputError, match=r"^gather_grad: indices\[1, 0\] = 7: expected "
                                               r"an index in -7\.\.6 \(output_sizes\[axis\] "
                                               r"= 7\)$"):
        ex(x=x0, i=np.array([0, 1, 2], np.int32), j=np.array([[0, 1], [7, 9]]))
    with pytest.raises(gradc.InputError, match=r"^gather: indices\[2\] = -5: "):
        ex(x=x0, i=np.array([0, 1, -5], np.int32), j=np.array([[0, 1], [7, 9]]))
    assert ex(x=x0, i=np.array([0, 1, 2], np.int32), j=np.array([[0, 1], [6, 0]]))["z"].shape \
        == (7, 1)


def test_every_launch_after_the_first_check_stops_on_its_record():
    """In the generated program: the record's offset, no guard before the first check, a guard
    on every launch after it; a program without an index check has neither."""
    p = generate(gradc.optimize(_in_place_graph()).graph, {}, {"p.next": "p"})
    assert p.error_offset is not None and p.in_place == {0: 0}
    guard = f"if (*(const int64_t *)(gc_arena + {p.error_offset}) != 0) return;"
    bodies = p.source.split("GC_KERNEL ")[1:]
    first = next(n for n, b in enumerate(bodies) if "__syncthreads" in b)
    assert all(guard not in b for b in bodies[:first + 1])
    assert all(guard in b for b in bodies[first + 1:]) and len(bodies) > first + 2
    # the in-place halving runs after the check (the plan moved it there)
    halve = next(n for n, b in enumerate(bodies) if "gc_mul_f32(t0, t1)" in b)  # x86 NaNs
    assert halve > first
    for g in (_in_place_graph(), _two_checks()):  # the record lies inside the arena
        q = generate(gradc.optimize(g).graph, {})
        assert q.error_offset is not None
        assert q.error_offset + 8 * index.RECORD <= q.arena_bytes
    plain = gradc.Graph("plain")
    plain.output(ops.neg(plain.input("x", "float32", (3,))), "y")
    q = generate(plain, {})
    assert q.error_offset is None and "gc_arena + 256) != 0" not in q.source


def test_the_record_describes_like_the_c_target():
    """Both compiled targets' error records are read by one function (record_message)."""
    from gradc.ir.ops.gather import RECORD_CODES, record_message
    assert index.RECORD_CODES is RECORD_CODES
    rec = [RECORD_CODES["gather_grad"], -6, 5, 2, 1, 0] + [0] * 6
    assert record_message(rec) == ("gather_grad: indices[1, 0] = -6: expected an index in "
                                   "-5..4 (output_sizes[axis] = 5)")
    assert record_message([1, 7, 4, 0] + [0] * 8) == ("gather: indices = 7: expected an index "
                                                      "in -4..3 (input.shape[axis] = 4)")
