"""Generated programs stand on their own: no pointer to a document outside the repository.

A user reads the NumPy, C and CUDA source gradc writes (``gradc compile -t c -o step.c``); its
comments and docstrings must say what a rule is, not cite the specification files, which the
repository does not ship. The graphs cover every fixed text a program copies (the C prelude,
transcend.h, mm.h; the CUDA prelude and the C helpers it copies) and the emitters with the most
comments (pooling, resample, gelu, erf, sin, normalization, gather, softmax, gemm, convolution,
batch normalization, adam, random numbers); the NumPy helpers are checked for every operator,
since each copies its reference's source text, comments included. The CUDA source is written
without NVRTC or a GPU.
"""

from __future__ import annotations

import pydoc
import re

import pytest

import gradc
from gradc import ops
from gradc.api import artifact
from gradc.backends.numpy import helpers
from gradc.ir.ops import REGISTRY

# The specification files, the design notes, the shared folder; "section 6.1" is what the NumPy
# target's copies made of a section sign.
OUTSIDE = re.compile(r"SPEC|DESIGN\.md|API\.md|\.\./shared|\u00a7|\bsection \d")


def _assert_self_contained(text: str, what: str) -> None:
    bad = [f"{i}: {line.strip()}" for i, line in enumerate(text.splitlines(), 1)
           if OUTSIDE.search(line)]
    assert not bad, f"{what} points outside the repository:\n" + "\n".join(bad[:20])


def _images() -> gradc.Graph:
    """Convolution, batch normalization, both poolings, resampling and their gradients."""
    g = gradc.Graph("images")
    x, w = g.input("x", "float32", ("N", 2, 8, 8)), g.input("w", "float32", (3, 2, 3, 3))
    s, b = g.input("s", "float32", (1, 3, 1, 1)), g.input("b", "float32", (1, 3, 1, 1))
    y = ops.convolution(x, w, start_padding=(1, 1), end_padding=(1, 1))
    y = ops.batch_normalization_training(y, s, b)[0]
    m = ops.max_pooling(y, (2, 2), strides=(2, 2))
    a = ops.average_pooling(y, (3, 3), strides=(2, 2), start_padding=(1, 1),
                            end_padding=(0, 0))
    up = (1.0, 1.0, 2.0, 2.0)
    r = ops.resample(ops.add(m, a), up, interpolation_mode="linear",
                     input_pixel_offsets=(0, 0, 0.5, 0.5),
                     output_pixel_offsets=(0, 0, -0.5, -0.5))
    g.output(ops.max_pooling_grad(y, ops.add(m, a), (2, 2), strides=(2, 2)), "dy")
    g.output(ops.average_pooling_grad(a, ("N", 3, 8, 8), (3, 3), strides=(2, 2),
                                      start_padding=(1, 1), end_padding=(0, 0)), "da")
    g.output(ops.resample_grad(r, ("N", 3, 4, 4), up, interpolation_mode="linear"), "dr")
    g.output(ops.sin(ops.pow(ops.erf(ops.resample(r, up)), 0.5)), "e")
    return g


def _tokens() -> gradc.Graph:
    """Gather, layer normalization, gelu, gemm, softmax, reductions, adam, random numbers."""
    g = gradc.Graph("tokens")
    idx = g.input("idx", "int64", ("N", 4))
    emb, w = g.input("emb", "float32", (10, 8)), g.input("w", "float32", (1, 8, 8))
    mom, vel = g.input("m", "float32", (1, 8, 8)), g.input("v", "float32", (1, 8, 8))
    state, step = g.input("state", "uint32", (6,)), g.input("step", "int64", ())
    gam = g.input("gamma", "float32", (1, 1, 8))
    h = ops.gather(emb, idx)
    n = ops.mean_variance_normalization(h, gam, gam, axes=(2,))
    a = ops.gelu(ops.gemm(n, w), "tanh")
    p = ops.softmax(ops.gelu(a), (2,))
    dn = ops.mean_variance_normalization_grad(h, ops.gelu_grad(a, p), gam, axes=(2,))[0]
    g.output(ops.log_softmax(p, (2,)), "lp")
    g.output(ops.reduce_max(dn, (1,)), "mx")
    g.output(ops.gather_grad(dn, idx, (10, 8)), "demb")
    g.output(ops.random_generator(state, (4,))[0], "bits")
    g.output(ops.adam_optimizer(w, mom, vel, ops.mul(w, w), step, 0.01)[0], "w_next")
    return g


GRAPHS = (_images, _tokens)


@pytest.mark.parametrize("make", GRAPHS, ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("target", ["numpy", "c", "cuda"])
def test_generated_source_points_nowhere_outside(target, make):
    text = artifact(make(), target, shapes={"N": 2})
    assert isinstance(text, str)
    _assert_self_contained(text, f"the {target} source of {make.__name__.strip('_')}")


def test_numpy_helpers_of_every_operator_point_nowhere_outside():
    names = set()
    for op in REGISTRY:
        name = helpers.reference_helper(op)
        try:
            helpers.helper(name)
        except gradc.GradcError:
            continue  # a NumPy ufunc's reference (add, mul, sub): never copied
        names.add(name)
    assert len(names) > 40
    _assert_self_contained(helpers.helpers_source(names), "the NumPy helpers")


def test_public_docstrings_point_nowhere_outside():
    """What ``help()`` shows of gradc, gradc.ops and gradc.optim (every public name, methods
    included) stands on its own too."""
    for module in (gradc, ops, gradc.optim):
        _assert_self_contained(pydoc.render_doc(module, renderer=pydoc.plaintext),
                               f"help({module.__name__})")
        for name in module.__all__:
            text = pydoc.render_doc(getattr(module, name), renderer=pydoc.plaintext)
            _assert_self_contained(text, f"help({module.__name__}.{name})")
