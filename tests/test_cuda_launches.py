"""The cuda target's launch count: a reshape into an output is no copy kernel, a relu of a
convolution runs in its store, and the kernels that only write the graph's inputs and outputs
(a training step's updates) share one launch -- unless one writes what another reads.

Each program runs through the host harness (``runtime="host"``; on the GPU under
``GRADC_TEST_CUDA=only``) against the reference, bit for bit; the launches are read from the
generated program.
"""

from __future__ import annotations

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.backends.cuda.emit import generate

from helpers import assert_bits, cuda_targets

pytestmark = pytest.mark.skipif(not cuda_targets(), reason="no C++ compiler for the harness")


def _run(g: gradc.Graph, feeds: dict, tmp_path, in_place: dict | None = None) -> tuple:
    """(outputs, program, executable) of a graph after the default passes: on the host
    harness, or on the GPU when the tests run there (GRADC_TEST_CUDA=only)."""
    program = generate(gradc.optimize(g).graph, {}, in_place)
    runtime = "host" if "cuda-host" in cuda_targets() else "device"
    ex = gradc.compile(g, target="cuda", runtime=runtime, cache_dir=str(tmp_path),
                       update_in_place=in_place or {})
    return ex(**{k: v.copy() for k, v in feeds.items()}), program, ex


def _labels(program) -> list[str]:
    return [x.label.split(" -> ")[0] for x in program.launches]


def test_running_statistics_update_without_a_reshape_kernel(tmp_path):
    """running_mean' = reshape(m * 0.9 + mean * 0.1) as an output updated in place: the update
    kernel writes the output's slot (the input's, in place); no reshape launch remains."""
    g = gradc.Graph("stats")
    x = g.input("x", "float32", (4, 3, 5, 5))
    rm = g.input("rm", "float32", (3,))
    s = g.input("s", "float32", (1, 3, 1, 1))
    y, mean, _ = ops.batch_normalization_training(x, s, s, 1e-5)
    upd = ops.add(ops.mul(ops.reshape(rm, (1, 3, 1, 1)), ops.constant(np.float32(0.9))),
                  ops.mul(mean, ops.constant(np.float32(0.1))))
    g.output(y, "y")
    g.output(ops.reshape(upd, (3,)), "rm_next")
    g.output(ops.reshape(mean, (3,)), "mean_flat")  # a reshape of a kernel's other result
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((4, 3, 5, 5)).astype(np.float32),
             "rm": rng.standard_normal(3).astype(np.float32),
             "s": rng.standard_normal((1, 3, 1, 1)).astype(np.float32)}
    got, program, ex = _run(g, feeds, tmp_path, {"rm_next": "rm"})
    assert "reshape" not in _labels(program)
    assert ex.in_place == {"rm_next": "rm"}
    want = gradc.compile(g, target="reference")(**feeds)
    for k in want:
        assert_bits(got[k], want[k], nan_payload=False)


def test_a_reshape_of_an_input_into_an_output_is_still_a_copy(tmp_path):
    g = gradc.Graph("copy")
    x = g.input("x", "float32", (2, 6))
    g.output(ops.reshape(x, (3, 4)), "y")
    feeds = {"x": np.arange(12, dtype=np.float32).reshape(2, 6)}
    got, program, _ = _run(g, feeds, tmp_path)
    assert _labels(program) == ["reshape"]
    assert_bits(got["y"], feeds["x"].reshape(3, 4))


def test_updates_share_one_launch(tmp_path):
    """Three parameter updates (each an element-wise group writing its parameter in place)
    after a backward pass: one launch for the three, after everything else."""
    g = gradc.Graph("sgd")
    rng = np.random.default_rng(1)
    feeds = {}
    ws = []
    for i, shape in enumerate(((5, 7), (7,), (300, 3))):
        ws.append(g.input(f"w{i}", "float32", shape))
        feeds[f"w{i}"] = rng.standard_normal(shape).astype(np.float32)
    grads = g.input("gs", "float32", (300, 7))
    feeds["gs"] = rng.standard_normal((300, 7)).astype(np.float32)
    total = ops.reduce_sum(grads, (0,))
    lr = ops.constant(np.float32(0.01))
    g.output(ops.sub(ws[0], ops.mul(ops.mul(ws[0], total), lr)), "w0_next")
    g.output(ops.sub(ws[1], ops.mul(total, lr)), "w1_next")
    g.output(ops.sub(ws[2], ops.mul(ops.slice(grads, (0, 0), (300, 3), (1, 1)), lr)), "w2_next")
    g.output(total, "total")
    in_place = {f"w{i}_next": f"w{i}" for i in range(3)}
    got, program, ex = _run(g, feeds, tmp_path, in_place)
    labels = _labels(program)
    assert labels[-1] == "merged" and program.launches[-1].label.endswith("3 kernels")
    assert ex.in_place == in_place
    want = gradc.compile(g, target="reference")(**feeds)
    for k in want:
        assert_bits(got[k], want[k])


@pytest.mark.parametrize("count", [2, 5, 11])
def test_a_merged_launch_finds_each_blocks_update_by_halving(tmp_path, count):
    """``count`` updates of parameters of 1..600 elements (some over several blocks) in one
    launch: every element updated exactly once, bit for bit; a block tests about log2(count)
    ranges (one ``if`` per split of the list, nested), not every range before its own."""
    g = gradc.Graph("many")
    rng = np.random.default_rng(count)
    feeds, in_place = {}, {}
    sizes = [int(s) for s in rng.integers(1, 600, count)]
    sizes[0] = 1
    grads = g.input("gs", "float32", (sum(sizes),))
    feeds["gs"] = rng.standard_normal(sum(sizes)).astype(np.float32)
    total = ops.reduce_sum(ops.mul(grads, grads), (0,))
    lr = ops.constant(np.float32(0.01))
    at = 0
    for i, size in enumerate(sizes):
        w = g.input(f"w{i}", "float32", (size,))
        feeds[f"w{i}"] = rng.standard_normal(size).astype(np.float32)
        gi = ops.slice(grads, (at,), (size,), (1,))
        g.output(ops.sub(w, ops.mul(ops.mul(gi, total), lr)), f"w{i}_next")
        in_place[f"w{i}_next"] = f"w{i}"
        at += size
    got, program, _ = _run(g, feeds, tmp_path, in_place)
    assert program.launches[-1].label == f"merged -> {count} kernels"
    want = gradc.compile(g, target="reference")(**feeds)
    for k in want:
        assert_bits(got[k], want[k])
    src = program.source.split("GC_KERNEL")[-1]
    ifs = [line for line in src.splitlines() if line.strip().startswith("if (blockIdx.x < ")]
    assert len(ifs) == count - 1
    depth = max(len(line) - len(line.lstrip()) for line in ifs) // 2  # CWriter indents by 2
    assert depth <= (count - 1).bit_length()
    assert program.launches[-1].grid == sum(-(-s // 256) for s in sizes)


def test_an_update_that_overwrites_what_another_reads_gets_a_launch_of_its_own(tmp_path):
    """b = every other element of a (a gather, not fused with a', into an output); a' = 2a
    overwrites a in place: a' runs after b (the plan moves the writer after the last reader),
    never in the same launch."""
    g = gradc.Graph("hazard")
    a = g.input("a", "float32", (40,))
    g.output(ops.mul(a, ops.constant(np.float32(2.0))), "a2")
    g.output(ops.slice(a, (1,), (39,), (2,)), "b2")
    feeds = {"a": np.arange(40, dtype=np.float32)}
    got, program, ex = _run(g, feeds, tmp_path, {"a2": "a"})
    assert ex.in_place == {"a2": "a"}
    assert "merged" not in _labels(program) and len(program.launches) == 2
    assert _labels(program) == ["slice", "mul"]  # the writer of a, last
    assert_bits(got["a2"], feeds["a"] * 2)
    assert_bits(got["b2"], feeds["a"][1::2])


def test_a_relu_of_a_convolution_runs_in_its_store():
    g = gradc.Graph("cr")
    x, w = g.input("x", "float32", (1, 2, 5, 5)), g.input("w", "float32", (3, 2, 3, 3))
    g.output(ops.relu(ops.convolution(x, w, None)), "y")
    assert _labels(generate(gradc.optimize(g).graph, {})) == ["convolution"]
