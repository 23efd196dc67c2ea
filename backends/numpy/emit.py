"""Per-op emitters of the NumPy target: each writes the statements of one node.

Every emitter reproduces its op's reference formulation (``gradc.ir.ops``: same ufuncs, same
comparisons, same order), so results are bit-identical to the reference target. Elementwise
emitters write into a free operand buffer when ``FunctionEmitter.reusable`` finds one
(``np.add(a, b, out=a)``, ``np.copyto(t, 0, where=...)``); selections in place copy exactly the
values the reference's ``np.where`` selects. Ops whose reference is more than an expression call
a helper copied into the module (``helpers``).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from gradc.ir.core import Value
from gradc.ir.ops.slice import copy_start
from gradc.ir.types import Dim

from gradc.backends.numpy.function import FunctionEmitter, Slot, Step
from gradc.backends.numpy.helpers import reference_helper
from gradc.backends.numpy.training import emit_random_generator
from gradc.backends.numpy.reduce import emit_element_count
from gradc.backends.numpy.gather import emit_gather_grad
from gradc.backends.numpy.text import dtype_expr, scalar


# -- elementwise ops ------------------------------------------------------------------------
def _zero(v: Value) -> str:
    return scalar(v.type.dtype, 0)


def _wrap0(step: Step, expr: str) -> str:
    """Ufuncs on 0-d arrays return scalars; keep arrays (as the reference's ``np.asarray``)."""
    return f"np.asarray({expr})" if step.node.outputs[0].type.rank == 0 else expr


def _keep(em: FunctionEmitter, step: Step, mask: str, v: int) -> None:
    """``np.where(mask, operand v, 0)`` through the module's ``_keep`` (in place if free)."""
    em.module.use("_keep")
    if em.reusable(step, [v]) is not None:
        buf = em.in_place(step, v)
        em.emit(f"_keep({mask}, {buf}, out={buf})")
        return
    src = em.var(step.ins[v])
    y = em.fresh_array(step.node.outputs[0])
    em.emit(f"{y} = _keep({mask}, {src})")


def emit_relu(em: FunctionEmitter, step: Step) -> None:
    """relu: ``np.where(x > 0, x, 0)`` (``_keep``), in place if free."""
    _keep(em, step, f"{em.var(step.ins[0])} > 0", 0)


def emit_relu_grad(em: FunctionEmitter, step: Step) -> None:
    """relu_grad: ``np.where(x > 0, dy, 0)`` (``_keep``), in place on dy if free."""
    _keep(em, step, f"{em.var(step.ins[0])} > 0", 1)


def _bounds(step: Step) -> tuple[str, str, str]:
    a, d = step.node.attrs, step.ins[0].type.dtype
    nan_value = a["max"] if a["min"] <= a["max"] else a["min"]
    return scalar(d, a["min"]), scalar(d, a["max"]), scalar(d, nan_value)


def emit_clip(em: FunctionEmitter, step: Step) -> None:
    """clip: cap at max, raise to min, then NaN -> max (min if min > max); in place if free."""
    mn, mx, nan_value = _bounds(step)
    if em.reusable(step, [0]) is not None:
        buf = em.in_place(step, 0)
        em.emit(f"np.copyto({buf}, {mx}, where={buf} > {mx})")
    else:
        x = em.var(step.ins[0])
        buf = em.fresh_array(step.node.outputs[0])
        em.emit(f"{buf} = np.where({x} > {mx}, {mx}, {x})")
    em.emit(f"np.copyto({buf}, {mn}, where={buf} < {mn})")
    if step.ins[0].type.dtype.is_float:  # NaN stays NaN through both steps
        em.emit(f"np.copyto({buf}, {nan_value}, where={buf} != {buf})")


def emit_clip_grad(em: FunctionEmitter, step: Step) -> None:
    """clip_grad: 0 where x <= min or x >= max, else dy; in place on dy if free."""
    mn, mx, _ = _bounds(step)
    x = em.var(step.ins[0])
    _keep(em, step, f"~(({x} <= {mn}) | ({x} >= {mx}))", 1)  # NaN x keeps dy


def _ufunc(name: str) -> Callable[[FunctionEmitter, Step], None]:
    def emit_ufunc(em: FunctionEmitter, step: Step) -> None:
        args = ", ".join(em.var(v) for v in step.ins)
        p = em.reusable(step, range(len(step.ins)))
        if p is not None:
            buf = em.in_place(step, p)
            em.emit(f"np.{name}({args}, out={buf})")
            return
        y = em.fresh_array(step.node.outputs[0])
        em.emit(f"{y} = {_wrap0(step, f'np.{name}({args})')}")
    emit_ufunc.__doc__ = f"np.{name}, into a free operand buffer when there is one."
    return emit_ufunc


def emit_identity(em: FunctionEmitter, step: Step) -> None:
    """identity: a second name for the same array (copied if it must be returned)."""
    x = em.var(step.ins[0])
    y = em.view(step.node.outputs[0], step.ins[0])
    em.emit(f"{y} = {x}")


def emit_cast(em: FunctionEmitter, step: Step) -> None:
    """cast: ``astype`` (a new array)."""
    x = em.var(step.ins[0])
    y = em.fresh_array(step.node.outputs[0])
    em.emit(f"{y} = {x}.astype({dtype_expr(step.node.attrs['dtype'])})")


def emit_expand(em: FunctionEmitter, step: Step) -> None:
    """expand: a read-only broadcast view."""
    x = em.var(step.ins[0])
    out = step.node.outputs[0]
    y = em.view(out, step.ins[0], writable=False, readonly=True)
    em.emit(f"{y} = np.broadcast_to({x}, {em.shape(out.type.shape)})")


# -- structural ops -------------------------------------------------------------------------
def emit_constant(em: FunctionEmitter, step: Step) -> None:
    """constant: a module-level array, never written."""
    name = em.module.constant(step.node.attrs["value"])
    em.define(step.node.outputs[0], Slot(name, em.new_storage(foreign=True), writable=False))


def emit_reshape(em: FunctionEmitter, step: Step) -> None:
    """reshape: ``np.reshape`` (a view when NumPy can make one)."""
    x = em.var(step.ins[0])
    out = step.node.outputs[0]
    y = em.view(out, step.ins[0])
    em.emit(f"{y} = np.reshape({x}, {em.shape(out.type.shape)})")


def _axis_index(start: int, stride: int, count: Dim, whole: bool) -> str:
    """Basic-slicing text for indices start, start+stride, ... (count of them)."""
    if whole:  # the whole-axis window of a symbolic dim: offset 0, stride +-1
        return ":" if stride > 0 else "::-1"
    assert isinstance(count, int)
    if stride == 0:
        return f"{start}:{start + 1}"
    last = start + stride * (count - 1)
    if stride > 0:
        step = "" if stride == 1 else f":{stride}"
        return f"{start or ''}:{last + 1}{step}"
    return f"{start}:{'' if last - 1 < 0 else last - 1}:{stride}"


def _window_index(attrs: Any, full: Sequence[Dim], counts: Sequence[Dim]) -> str:
    off, size, stride = (attrs[k] for k in ("input_window_offsets", "input_window_sizes",
                                            "input_window_strides"))
    static = [0 if isinstance(d, str) else d for d in full]  # symbolic axes are whole windows
    start = copy_start(off, size, stride, static)
    parts = [_axis_index(start[i], stride[i], counts[i], isinstance(size[i], str))
             for i in range(len(full))]
    return ", ".join(parts)


def emit_slice(em: FunctionEmitter, step: Step) -> None:
    """slice: basic slicing (a view), ``np.repeat`` on stride-0 axes."""
    x_val, out = step.ins[0], step.node.outputs[0]
    counts = out.type.shape
    expr = f"{em.var(x_val)}[{_window_index(step.node.attrs, x_val.type.shape, counts)}]"
    strides = step.node.attrs["input_window_strides"]
    repeats = [(i, n) for i, (n, st) in enumerate(zip(counts, strides)) if st == 0 and n != 1]
    for axis, n in repeats:
        expr = f"np.repeat({expr}, {n}, axis={axis})"
    # A slice view is never an out= buffer: NumPy 2.4 computes np.negative(v, out=v) wrongly
    # for some negative-stride views (int32/float32 SIMD loops).
    y = em.fresh_array(out) if repeats else em.view(out, x_val, writable=False)
    em.emit(f"{y} = {expr}")


def emit_slice_grad(em: FunctionEmitter, step: Step) -> None:
    """slice_grad: zeros, then the window assigned from dy (a one-to-one store)."""
    dy_val, out = step.ins[0], step.node.outputs[0]
    index = _window_index(step.node.attrs, out.type.shape, dy_val.type.shape)
    y = em.fresh_array(out)
    em.emit(f"{y} = np.zeros({em.shape(out.type.shape)}, {dtype_expr(out.type.dtype)})")
    em.emit(f"{y}[{index}] = {em.var(dy_val)}")


def _helper(op: str) -> Callable[[FunctionEmitter, Step], None]:
    name = reference_helper(op)

    def emit_helper(em: FunctionEmitter, step: Step) -> None:
        attrs = em.module.attrs(step.node.attrs)
        em.module.use(name)
        args = ", ".join([attrs] + [em.var(v) for v in step.ins])
        outs = [em.fresh_array(v) for v in step.node.outputs]
        if len(outs) == 1:
            em.emit(f"{outs[0]} = {name}({args})[0]")
        else:
            em.emit(f"{', '.join(outs)} = {name}({args})")
    emit_helper.__doc__ = f"A call of the module's {name} (a copy of the reference)."
    return emit_helper


EMITTERS: dict[str, Callable[[FunctionEmitter, Step], None]] = {
    "relu": emit_relu, "relu_grad": emit_relu_grad, "clip": emit_clip,
    "clip_grad": emit_clip_grad, "add": _ufunc("add"), "sub": _ufunc("subtract"),
    "mul": _ufunc("multiply"), "neg": _ufunc("negative"), "identity": emit_identity,
    "cast": emit_cast, "expand": emit_expand, "constant": emit_constant,
    "reshape": emit_reshape, "slice": emit_slice, "slice_grad": emit_slice_grad,
    "max_pooling": _helper("max_pooling"), "max_pooling_grad": _helper("max_pooling_grad"),
    "resample": _helper("resample"), "resample_grad": _helper("resample_grad"),
    "reduce_sum": _helper("reduce_sum"),
    # -- math
    **{op: _helper(op) for op in (
        "div", "exp", "log", "sqrt", "pow", "sigmoid", "tanh", "leaky_relu", "maximum",
        "minimum", "greater", "less", "equal", "greater_equal", "less_equal", "where")},
    # -- reduce
    **{op: _helper(op) for op in (
        "reduce_mean", "reduce_max", "reduce_min", "reduce_max_grad", "reduce_min_grad",
        "softmax", "log_softmax")},
    "element_count": emit_element_count,
    # -- movement
    **{op: _helper(op) for op in ("join", "split", "transpose", "pad", "one_hot")},
    # -- conv
    "convolution": _helper("convolution"),
    "convolution_filter_grad": _helper("convolution_filter_grad"),
    # -- gemm
    "gemm": _helper("gemm"),
    "average_pooling": _helper("average_pooling"),
    "average_pooling_grad": _helper("average_pooling_grad"),
    # -- batch_norm
    **{op: _helper(op) for op in (
        "batch_normalization", "batch_normalization_grad", "batch_normalization_training",
        "batch_normalization_training_grad")},
    # -- training
    "random_generator": emit_random_generator, "adam_optimizer": _helper("adam_optimizer"),
    # -- activation (SPEC-transformers §25)
    **{op: _helper(op) for op in ("gelu", "gelu_grad", "erf", "sin", "cos", "is_nan")},
    # -- normalization, gather (SPEC-transformers §24, §26)
    **{op: _helper(op) for op in (
        "mean_variance_normalization", "mean_variance_normalization_grad", "gather")},
    "gather_grad": emit_gather_grad,
}
