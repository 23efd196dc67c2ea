"""Every validation rule of SPEC.md raises VerifyError naming its field.

The rules are the §1.2-§6 checklists and §8.5.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import gradc
from gradc import ops


def val(dtype="float32", shape=(2, 3), name="x", g=None):
    g = g or gradc.Graph("v")
    return g.input(name, dtype, shape)


def pair(dt1, s1, dt2, s2):
    g = gradc.Graph("v")
    return g.input("x", dt1, s1), g.input("dy", dt2, s2)


F32 = "float32"
CASES = [
    # SPEC §8.5
    ("V-1", lambda: ops.relu_grad(*pair(F32, (2, 3), "float16", (2, 3))), "relu_grad",
     "input_gradient.dtype"),
    ("V-2", lambda: ops.relu(val("int64", (4,))), "relu", "input.dtype"),
    ("V-3", lambda: ops.clip(val("int8", (4,)), -200, 5), "clip", "min"),
    ("V-4", lambda: ops.slice(val(F32, (4,)), (2,), (3,), (1,)), "slice", "input_window_sizes"),
    ("V-5", lambda: ops.slice_grad(val(F32, (2,)), (5,), (1,), (3,), (0,)), "slice_grad",
     "input_window_strides[0]"),
    ("V-6", lambda: ops.slice_grad(val(F32, (3,)), (5,), (0,), (4,), (2,)), "slice_grad",
     "input_gradient.shape"),
    ("V-7", lambda: ops.max_pooling(val(F32, (1, 4, 4)), (2,)), "max_pooling", "input.rank"),
    ("V-8", lambda: ops.max_pooling_grad(*pair(F32, (1, 1, 4, 4), F32, (1, 1, 5, 5)), (2, 2)),
     "max_pooling_grad", "input_gradient.shape"),
    ("V-9", lambda: ops.max_pooling_grad(*pair(F32, (1, 1, 4, 4), F32, (1, 2, 3, 3)), (2, 2)),
     "max_pooling_grad", "input_gradient.shape"),
    ("V-10", lambda: ops.resample(val(F32, (1, 1, 2, 2)), (1, 1, 0, 2)), "resample", "scales[2]"),
    ("V-11", lambda: ops.resample(val(F32, (1, 1, 2, 2)), (1, 1, 2, 2),
                                  interpolation_mode="cubic"), "resample", "interpolation_mode"),
    ("V-12", lambda: ops.resample_grad(val("int32", (1, 1, 2, 2)), (1, 1, 1, 1), (1, 1, 2, 2)),
     "resample_grad", "input_gradient.dtype"),
    ("V-13", lambda: ops.resample(val(F32, (1, 1, 1, 1, 2)), (1, 1, 1, 1, 2)), "resample",
     "input.rank"),
    # §1.2 dtype and rank tables
    ("relu-rank", lambda: ops.relu(val(F32, (1,) * 9)), "relu", "input.rank"),
    ("relu-uint", lambda: ops.relu(val("uint8", (3,))), "relu", "input.dtype"),
    ("relu-bool", lambda: ops.relu(val("bool", (3,))), "relu", "input.dtype"),
    ("relu_grad-dtype", lambda: ops.relu_grad(*pair("int64", (3,), "int64", (3,))), "relu_grad",
     "input.dtype"),
    ("relu_grad-rank", lambda: ops.relu_grad(*pair(F32, (1,) * 9, F32, (1,) * 9)), "relu_grad",
     "input.rank"),
    ("relu_grad-shape", lambda: ops.relu_grad(*pair(F32, (2, 3), F32, (3, 2))), "relu_grad",
     "input_gradient.shape"),
    ("clip-dtype", lambda: ops.clip(val("bool", (3,)), 0, 1), "clip", "input.dtype"),
    ("clip-rank", lambda: ops.clip(val(F32, (1,) * 9), 0, 1), "clip", "input.rank"),
    ("clip-nan", lambda: ops.clip(val(F32, (3,)), np.nan, 1), "clip", "min"),
    ("clip-max-frac", lambda: ops.clip(val("int32", (3,)), 0, 1.5), "clip", "max"),
    ("clip-uint-neg", lambda: ops.clip(val("uint8", (3,)), -1, 1), "clip", "min"),
    ("clip-str", lambda: ops.clip(val(F32, (3,)), "0", 1), "clip", "min"),
    ("clip_grad-dtype", lambda: ops.clip_grad(*pair(F32, (3,), "float64", (3,)), 0, 1),
     "clip_grad", "input_gradient.dtype"),
    ("clip_grad-shape", lambda: ops.clip_grad(*pair(F32, (3,), F32, (4,)), 0, 1), "clip_grad",
     "input_gradient.shape"),
    ("clip_grad-max", lambda: ops.clip_grad(*pair("int8", (3,), "int8", (3,)), 0, 300),
     "clip_grad", "max"),
    ("clip_grad-dtype-table", lambda: ops.clip_grad(*pair("bool", (3,), "bool", (3,)), 0, 1),
     "clip_grad", "input.dtype"),
    # slice
    ("slice-dtype", lambda: ops.slice(val("bool", (4,)), (0,), (1,), (1,)), "slice", "input.dtype"),
    ("slice-rank", lambda: ops.slice(val(F32, (1,) * 9), (0,) * 9, (1,) * 9, (1,) * 9), "slice",
     "input.rank"),
    ("slice-len", lambda: ops.slice(val(F32, (4, 4)), (0,), (1, 1), (1, 1)), "slice",
     "input_window_offsets"),
    ("slice-len-strides", lambda: ops.slice(val(F32, (4, 4)), (0, 0), (1, 1), (1,)), "slice",
     "input_window_strides"),
    ("slice-off", lambda: ops.slice(val(F32, (4,)), (-1,), (1,), (1,)), "slice",
     "input_window_offsets[0]"),
    ("slice-size", lambda: ops.slice(val(F32, (4,)), (0,), (0,), (1,)), "slice",
     "input_window_sizes[0]"),
    ("slice-stride-type", lambda: ops.slice(val(F32, (4,)), (0,), (2,), (1.5,)), "slice",
     "input_window_strides[0]"),
    ("slice-bool", lambda: ops.slice(val(F32, (4,)), (True,), (2,), (1,)), "slice",
     "input_window_offsets[0]"),
    ("slice-out-len", lambda: ops.slice(val(F32, (4,)), (0,), (4,), (1,), (4, 1)), "slice",
     "output_sizes"),
    ("slice-out-big", lambda: ops.slice(val(F32, (4,)), (0,), (4,), (2,), (3,)), "slice",
     "output_sizes[0]"),
    ("slice-out-zero", lambda: ops.slice(val(F32, (4,)), (0,), (4,), (0,), (0,)), "slice",
     "output_sizes[0]"),
    ("slice-symbolic", lambda: ops.slice(val(F32, ("N",)), (0,), (2,), (1,)), "slice",
     "input.shape[0]"),
    # slice_grad
    ("sg-dtype", lambda: ops.slice_grad(val("bool", (2,)), (4,), (0,), (2,), (1,)), "slice_grad",
     "input_gradient.dtype"),
    ("sg-out-len", lambda: ops.slice_grad(val(F32, (2,)), (4, 4), (0,), (2,), (1,)), "slice_grad",
     "output_sizes"),
    ("sg-out-zero", lambda: ops.slice_grad(val(F32, (2,)), (0,), (0,), (2,), (1,)), "slice_grad",
     "output_sizes[0]"),
    ("sg-window-len", lambda: ops.slice_grad(val(F32, (2,)), (4,), (0, 0), (2,), (1,)),
     "slice_grad", "input_window_offsets"),
    ("sg-off", lambda: ops.slice_grad(val(F32, (2,)), (4,), (-1,), (2,), (1,)), "slice_grad",
     "input_window_offsets[0]"),
    ("sg-size", lambda: ops.slice_grad(val(F32, (1,)), (4,), (0,), (0,), (1,)), "slice_grad",
     "input_window_sizes[0]"),
    ("sg-fit", lambda: ops.slice_grad(val(F32, (2,)), (4,), (3,), (2,), (1,)), "slice_grad",
     "input_window_sizes"),
    # max_pooling
    ("mp-dtype", lambda: ops.max_pooling(val("bool", (1, 1, 2, 2)), (2, 2)), "max_pooling",
     "input.dtype"),
    ("mp-static", lambda: ops.max_pooling(val(F32, (1, 1, "H", 2)), (2, 2)), "max_pooling",
     "input.shape[2]"),
    ("mp-window-len", lambda: ops.max_pooling(val(F32, (1, 1, 4, 4)), (2,)), "max_pooling",
     "window_size"),
    ("mp-window", lambda: ops.max_pooling(val(F32, (1, 1, 4, 4)), (2, 0)), "max_pooling",
     "window_size[1]"),
    ("mp-stride", lambda: ops.max_pooling(val(F32, (1, 1, 4, 4)), (2, 2), strides=(0, 1)),
     "max_pooling", "strides[0]"),
    ("mp-pad", lambda: ops.max_pooling(val(F32, (1, 1, 4, 4)), (2, 2), start_padding=(0, -1)),
     "max_pooling", "start_padding[1]"),
    ("mp-endpad", lambda: ops.max_pooling(val(F32, (1, 1, 4, 4)), (2, 2), end_padding=(1,)),
     "max_pooling", "end_padding"),
    ("mp-dil", lambda: ops.max_pooling(val(F32, (1, 1, 4, 4)), (2, 2), dilations=(1, 0)),
     "max_pooling", "dilations[1]"),
    ("mp-indices", lambda: ops.max_pooling(val(F32, (1, 1, 4, 4)), (2, 2), output_indices=1),
     "max_pooling", "output_indices"),
    ("mp-out", lambda: ops.max_pooling(val(F32, (1, 1, 4, 4)), (2, 2), output_sizes=(3, 5)),
     "max_pooling", "output_sizes[1]"),
    ("mp-out-len", lambda: ops.max_pooling(val(F32, (1, 1, 4, 4)), (2, 2), output_sizes=(3,)),
     "max_pooling", "output_sizes"),
    # max_pooling_grad
    ("mpg-dtype", lambda: ops.max_pooling_grad(*pair("int8", (1, 1, 4, 4), "int8", (1, 1, 3, 3)),
                                               (2, 2)), "max_pooling_grad", "input.dtype"),
    ("mpg-rank", lambda: ops.max_pooling_grad(*pair(F32, (4, 4), F32, (3, 3)), (2, 2)),
     "max_pooling_grad", "input.rank"),
    ("mpg-dy-dtype", lambda: ops.max_pooling_grad(*pair(F32, (1, 1, 4, 4), "float16",
                                                        (1, 1, 3, 3)), (2, 2)),
     "max_pooling_grad", "input_gradient.dtype"),
    ("mpg-dy-rank", lambda: ops.max_pooling_grad(*pair(F32, (1, 1, 4, 4), F32, (1, 1, 3, 3, 1)),
                                                 (2, 2)), "max_pooling_grad",
     "input_gradient.rank"),
    ("mpg-static", lambda: ops.max_pooling_grad(*pair(F32, (1, 1, 4, 4), F32, (1, 1, "H", 3)),
                                                (2, 2)), "max_pooling_grad",
     "input_gradient.shape[2]"),
    ("mpg-window", lambda: ops.max_pooling_grad(*pair(F32, (1, 1, 4, 4), F32, (1, 1, 3, 3)),
                                                (2, 2, 2)), "max_pooling_grad", "window_size"),
    # resample
    ("rs-dtype", lambda: ops.resample(val("int32", (2, 2)), (1, 1)), "resample", "input.dtype"),
    ("rs-scales-len", lambda: ops.resample(val(F32, (2, 2)), (1,)), "resample", "scales"),
    ("rs-scale-inf", lambda: ops.resample(val(F32, (2, 2)), (1, 1e39)), "resample", "scales[1]"),
    ("rs-scale-nan", lambda: ops.resample(val(F32, (2, 2)), (np.nan, 1)), "resample", "scales[0]"),
    ("rs-scale-neg", lambda: ops.resample(val(F32, (2, 2)), (1, -2)), "resample", "scales[1]"),
    ("rs-rounding", lambda: ops.resample(val(F32, (2, 2)), (1, 1), rounding_direction="down"),
     "resample", "rounding_direction"),
    ("rs-mode-case", lambda: ops.resample(val(F32, (2, 2)), (1, 1), interpolation_mode="Linear"),
     "resample", "interpolation_mode"),
    ("rs-ipo-len", lambda: ops.resample(val(F32, (2, 2)), (1, 1), input_pixel_offsets=(0,)),
     "resample", "input_pixel_offsets"),
    ("rs-opo-inf", lambda: ops.resample(val(F32, (2, 2)), (1, 1),
                                        output_pixel_offsets=(0, np.inf)), "resample",
     "output_pixel_offsets[1]"),
    ("rs-out-len", lambda: ops.resample(val(F32, (2, 2)), (1, 1), output_sizes=(2,)), "resample",
     "output_sizes"),
    ("rs-out-zero", lambda: ops.resample(val(F32, (2, 2)), (1, 1), output_sizes=(2, 0)),
     "resample", "output_sizes[1]"),
    ("rs-default-zero", lambda: ops.resample(val(F32, (2, 2)), (1, 0.25)), "resample",
     "scales[1]"),
    ("rs-symbolic", lambda: ops.resample(val(F32, ("N", 2)), (2, 1)), "resample",
     "input.shape[0]"),
    # resample_grad
    ("rsg-rank", lambda: ops.resample_grad(val(F32, (1,) * 5), (1,) * 5, (1,) * 5),
     "resample_grad", "input_gradient.rank"),
    ("rsg-out-len", lambda: ops.resample_grad(val(F32, (2, 2)), (2,), (1, 1)), "resample_grad",
     "output_sizes"),
    ("rsg-out-zero", lambda: ops.resample_grad(val(F32, (2, 2)), (2, 0), (1, 1)),
     "resample_grad", "output_sizes[1]"),
    ("rsg-scale", lambda: ops.resample_grad(val(F32, (2, 2)), (2, 2), (1, 0)), "resample_grad",
     "scales[1]"),
    ("rsg-mode", lambda: ops.resample_grad(val(F32, (2, 2)), (2, 2), (1, 1), "cubic"),
     "resample_grad", "interpolation_mode"),
    # arithmetic and structural ops
    ("add-dtype", lambda: ops.add(*pair(F32, (3,), "float64", (3,))), "add", "rhs.dtype"),
    ("add-bool", lambda: ops.add(*pair("bool", (3,), "bool", (3,))), "add", "lhs.dtype"),
    ("mul-broadcast", lambda: ops.mul(*pair(F32, (3,), F32, (4,))), "mul", "rhs.shape"),
    ("sub-symbols", lambda: ops.sub(*pair(F32, ("N",), F32, ("M",))), "sub", "rhs.shape"),
    ("reduce-axis", lambda: ops.reduce_sum(val(F32, (2, 3)), axes=(2,)), "reduce_sum", "axes[0]"),
    ("reduce-twice", lambda: ops.reduce_sum(val(F32, (2, 3)), axes=(1, -1)), "reduce_sum",
     "axes[1]"),
    ("reshape-count", lambda: ops.reshape(val(F32, (2, 3)), (4,)), "reshape", "shape"),
    ("reshape-symbols", lambda: ops.reshape(val(F32, ("N", 3)), (3, 2)), "reshape", "shape"),
    ("reshape-two-holes", lambda: ops.reshape(val(F32, (2, 3)), (-1, -1)), "reshape", "shape"),
    ("cast-dtype", lambda: ops.cast(val(F32, (2,)), "complex64"), "cast", "dtype"),
    ("unknown-arg", lambda: gradc.ir.ops.registry.make_node("relu", [val()], {"alpha": 1}), "relu",
     "alpha"),
]


@pytest.mark.parametrize("call,op,field", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rule_names_field(call, op, field):
    with pytest.raises(gradc.VerifyError) as e:
        call()
    assert str(e.value).startswith(f"{op}: {field}: expected "), str(e.value)
    assert ", got " in str(e.value)


def test_message_format_examples():
    with pytest.raises(gradc.VerifyError, match=r"^slice_grad: input_window_strides\[0\]: "
                       r"expected a non-zero integer, got 0$"):
        ops.slice_grad(val(F32, (2,)), (5,), (1,), (3,), (0,))
    with pytest.raises(gradc.VerifyError, match=r"^relu_grad: input_gradient.dtype: expected "
                       r"float32 \(same as input\), got float16$"):
        ops.relu_grad(*pair(F32, (2, 3), "float16", (2, 3)))


def test_checklist_order_first_failure_wins():
    # dtype (check 1) fails before rank (check 2)
    with pytest.raises(gradc.VerifyError, match="^relu: input.dtype"):
        ops.relu(val("int64", (1,) * 9))


def test_bounds_and_conversions_accepted():
    x = val("int8", (3,))
    ops.clip(x, 6.0, np.int64(7))  # integral floats and NumPy integers are fine
    y = val("float16", (3,))
    node = ops.clip(y, -1e6, 1e6).producer  # overflow to +-inf is allowed for floats
    assert node.attrs["min"] == -np.inf and node.attrs["max"] == np.inf
    z = val(F32, (2, 2))
    n = ops.resample(z, (0.1, 3.4028235e38), output_sizes=(1, 2)).producer
    assert n.attrs["scales"][0] == float(np.float32(0.1))


def test_symbolic_whole_axis_is_kept():
    x = val(F32, ("N", 4))
    y = ops.slice(x, (0, 1), ("N", 2), (-1, 1))
    assert y.type.shape == ("N", 2)
    dx = ops.slice_grad(y, ("N", 4), (0, 1), ("N", 2), (-1, 1))
    assert dx.type.shape == ("N", 4)
    r = ops.resample(x, (1, 2))
    assert r.type.shape == ("N", 8)
    assert ops.resample_grad(r, ("N", 4), (1, 2)).type.shape == ("N", 4)


def test_graph_errors():
    g = gradc.Graph("g")
    g.input("x", F32, (2,))
    with pytest.raises(gradc.VerifyError, match="name"):
        g.input("x", F32, (2,))
    with pytest.raises(gradc.VerifyError, match="shape"):
        g.input("y", F32, (0,))
    with pytest.raises(gradc.VerifyError, match="dtype"):
        g.input("z", "complex64", (2,))
    other = gradc.Graph("h").input("a", F32, (2,))
    with pytest.raises(gradc.VerifyError, match=r"add: operand 1 \(rhs\): expected a value "
                                                r"of graph 'g'.*got %a of graph 'h'"):
        ops.add(g.inputs[0], other)
    with pytest.raises(gradc.VerifyError, match="gradc value"):
        ops.relu(np.zeros(2, np.float32))


def test_slice_checks_strides_after_the_window_fit():
    """SPEC.md §4.1: offsets and sizes (3), the fit (4), then the strides' type (5)."""
    g = gradc.Graph("order")
    x = g.input("x", "float32", (4,))
    for args, field in [(((-1,), (1,), (1.5,)), "input_window_offsets[0]"),
                        (((0,), (5,), (1.5,)), "input_window_sizes"),
                        (((0,), (2,), (1.5,)), "input_window_strides[0]")]:
        with pytest.raises(gradc.VerifyError, match=rf"^slice: {re.escape(field)}: expected"):
            ops.slice(x, *args)


def test_huge_numbers_and_bad_shapes_are_verify_errors():
    g = gradc.Graph("huge")
    x = g.input("x", "float32", (4,))
    assert ops.clip(x, -10 ** 400, 1).producer.attrs["min"] == -np.inf  # overflow gives -inf
    with pytest.raises(gradc.VerifyError, match=r"^resample: scales\[0\]: expected a finite"):
        ops.resample(x, (10 ** 400,))
    with pytest.raises(gradc.VerifyError, match="shape: expected a sequence"):
        g.input("y", "float32", 3)
    with pytest.raises(gradc.VerifyError, match=r"shape\[0\]: expected an int in \[1, 2\*\*63"):
        g.input("z", "float32", (2 ** 64,))
