"""Text IR: print -> parse -> print is byte-identical; garbage raises only ParseError."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gradc
from gradc import ops
from gradc.ir.verify import verify

NAMES = st.one_of(st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True),
                  st.text(min_size=1, max_size=8))


@st.composite
def random_graph(draw):
    """A random valid graph over every op family, with odd names, symbols and constants."""
    g = gradc.Graph(draw(NAMES))
    dtype = draw(st.sampled_from(["float32", "float16", "float64"]))
    sym = draw(st.sampled_from(["N", "batch size", "n.1"]))
    used = set()

    def fresh():
        n = draw(NAMES.filter(lambda s: s not in used and not g.uses_name(s)))
        used.add(n)
        return n

    x = g.input(fresh(), dtype, (sym, 2, 4, 4))
    dy = g.input(fresh(), dtype, (sym, 2, 4, 4))
    pool = [x, dy]
    for _ in range(draw(st.integers(1, 8))):
        a = draw(st.sampled_from(pool))
        kind = draw(st.integers(0, 8))
        if kind == 0:
            v = ops.relu_grad(a, draw(st.sampled_from(pool)))
        elif kind == 1:
            lo = draw(st.sampled_from([-np.inf, -1.5, 0.0, 1e-3]))
            b = draw(st.sampled_from(pool))
            v = ops.clip_grad(a, b, lo, draw(st.sampled_from([6, np.inf])))
        elif kind == 2:
            v = ops.max_pooling_grad(x, a, (2, 2), (1, 1), (1, 0), (0, 1))
        elif kind == 3:
            s = ops.slice(a, (0, 1, 0, 3), (sym, 1, 4, 1), (1, -1, 2, -1))
            v = ops.slice_grad(s, (sym, 2, 4, 4), (0, 1, 0, 3), (sym, 1, 4, 1), (1, -1, 2, -1))
        elif kind == 4:
            sc = draw(st.sampled_from([0.5, 0.7, 1 / 3]))
            r = ops.resample(a, (1, 1, 2, 2), "linear", output_pixel_offsets=(0.1, -0.5, sc, 0))
            v = ops.resample_grad(r, (sym, 2, 4, 4), (1, 1, 2, 2), "linear",
                                  output_pixel_offsets=(0.1, -0.5, sc, 0))
        elif kind == 5:
            c = ops.constant(np.array(draw(st.lists(
                st.floats(allow_nan=True, width=16), min_size=4, max_size=4)), dtype))
            v = ops.mul(a, c)
        elif kind == 6:
            v = ops.reduce_sum(a, (0, 2), keepdims=True)
            v = ops.expand(v, a)
        elif kind == 7:
            v = ops.cast(ops.cast(a, "int32"), dtype)
        else:
            y, i = ops.max_pooling(a, (3, 3), (2, 2), (1, 1), (1, 1), output_indices=True)
            v = ops.max_pooling_grad(a, y, (3, 3), (2, 2), (1, 1), (1, 1))
        pool.append(v)
    for v in draw(st.lists(st.sampled_from(pool[2:]), min_size=1, max_size=3, unique=True)):
        g.output(v, fresh())
    return g


@settings(max_examples=150)
@given(random_graph())
def test_round_trip_is_byte_identical(g):
    text = str(g)
    h = gradc.parse(text)
    assert str(h) == text
    assert h == g
    verify(h)


def test_round_trip_exact_values():
    g = gradc.Graph("consts")
    x = g.input("x", "float32", (4,))
    payload = np.array([0x7FC00001, 0xFFC12345, 0, 0x80000000], np.uint32).view(np.float32)
    c = ops.constant(payload)
    h = ops.add(x, c)
    f16 = ops.cast(h, "float16")
    g.output(ops.clip(f16, -65504.0, 1e-7), "y")
    g.output(ops.resample(x, (2.1,), input_pixel_offsets=(1e-30,)), "r")
    text = str(g)
    g2 = gradc.parse(text)
    c2 = g2.nodes[0].attrs["value"]
    assert c2.view(np.uint32).tolist() == payload.view(np.uint32).tolist()
    assert str(g2) == text
    assert g2.nodes[-1].attrs["scales"] == (float(np.float32(2.1)),)


def test_printed_form():
    g = gradc.Graph("pool_step")
    x = g.input("x", "float32", ("N", 64, 56, 56))
    dy = g.input("dy", "float32", ("N", 64, 28, 28))
    g.output(ops.max_pooling_grad(x, dy, (2, 2), strides=(2, 2)), "dx")
    assert str(g) == (
        "graph pool_step(%x: f32[N,64,56,56], %dy: f32[N,64,28,28]) {\n"
        "  %dx = max_pooling_grad(%x, %dy) {window_size = [2, 2], strides = [2, 2], "
        "start_padding = [0, 0], end_padding = [0, 0], dilations = [1, 1]} : f32[N,64,56,56]\n"
        "  return %dx\n}")


GOOD = str(gradc.parse("""graph g(%x: f32[N,3], %dy: f32[N,3]) {
  %0 = relu_grad(%x, %dy) : f32[N,3]
  %1 = clip_grad(%x, %0) {min = 0.0, max = 6.0} : f32[N,3]
  return %1
}"""))


@pytest.mark.parametrize("text,where", [
    ("", (1, 1)),
    ("graph", (1, 6)),
    ("graph g(%x: f32[2]) { return %y }", (1, 30)),
    ("graph g(%x: f32[2]) {\n  %y = relu(%x) : f32[3]\n  return %y\n}", (2, 3)),
    ("graph g(%x: f32[2]) {\n  %y = nosuchop(%x) : f32[2]\n  return %y\n}", (2, 3)),
    ("graph g(%x: f32[2]) {\n  %y = relu(%x) {alpha = 1} : f32[2]\n  return %y\n}", (2, 3)),
    ("graph g(%x: f32[0]) { return %x }", (1, 17)),
    ("graph g(%x: f32[2], %x: f32[2]) { return %x }", (1, 21)),
    ("graph g(%x: f32[2]) { %y = relu(%x) : f32[2] return %y } trailing", (1, 58)),
    ("graph g(%x: q7[2]) { return %x }", (1, 13)),
    ("graph g(%x: f32[2]) { $ }", (1, 23)),
])
def test_parse_errors_have_position(text, where):
    with pytest.raises(gradc.ParseError) as e:
        gradc.parse(text)
    assert (e.value.line, e.value.column) == where, str(e.value)


@settings(max_examples=300)
@given(st.text(max_size=200))
def test_garbage_raises_only_parse_error(text):
    try:
        gradc.parse(text)
    except gradc.ParseError:
        pass


@settings(max_examples=300)
@given(st.data())
def test_mutated_text_raises_only_parse_error(data):
    text = GOOD
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(text)))
        j = data.draw(st.integers(i, min(len(text), i + 5)))
        text = text[:i] + data.draw(st.text(max_size=5)) + text[j:]
    try:
        gradc.parse(text)
    except gradc.ParseError:
        pass


def test_deep_nesting_is_a_parse_error():
    with pytest.raises(gradc.ParseError):
        gradc.parse("graph g(%x: f32[2]) {\n %y = relu(%x) {a = " + "[" * 5000 + "} : f32[2]")


def test_slice_attributes_print_in_argument_order():
    g = gradc.Graph("order")
    x = g.input("x", "float32", (4, 4))
    dy = g.input("dy", "float32", (2, 2))
    g.output(ops.slice(x, (0, 0), (4, 3), (2, -2)), "y")
    g.output(ops.slice_grad(dy, (4, 4), (0, 0), (4, 3), (2, -2)), "dx")
    text = str(g)
    assert ("{input_window_offsets = [0, 0], input_window_sizes = [4, 3], "
            "input_window_strides = [2, -2], output_sizes = [2, 2]}") in text
    assert ("{output_sizes = [4, 4], input_window_offsets = [0, 0], input_window_sizes = [4, 3], "
            "input_window_strides = [2, -2]}") in text
