"""The operator registry, the argument checker shared by every op, and node construction."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping, NoReturn, Sequence

import numpy as np

from gradc.errors import GradcError, VerifyError
from gradc.ir.core import Graph, Node, Value, adopt, current_graph
from gradc.ir.types import MAX_DIM, Dim, DType, TensorType

INT64_MIN, INT64_MAX = -2 ** 63, 2 ** 63 - 1  # every integer attribute is an int64 (as in ONNX)

REGISTRY: dict[str, "OpDef"] = {}

# The traits generic code asks about (``register`` rejects any other word):
#   pure         no side effects: CSE may merge two equal nodes, DCE may drop an unused one;
#   elementwise  one result whose element i depends only on element i of each (broadcast)
#                operand: fuses into one loop, and every target has a scalar form of it;
#   fusible      may join a fused group (elementwise ops, and the anchors of anchored groups).
TRAITS = frozenset({"pure", "elementwise", "fusible"})
PURE = frozenset({"pure"})
ELEMENTWISE = frozenset({"pure", "elementwise", "fusible"})

# The numerics classes an op declares (``OpDef.numerics``), what each promises, and so what
# ``gradc check`` holds each target to. docs/operators.md prints these sentences.
NUMERICS = {
    "exact": "each element is a selection, a copy or one correctly rounded operation (float16 "
             "computed in float32 and rounded once): every target gives the reference's bits, "
             "-0.0 and NaN payloads of copied values included.",
    "summing": "each element is a sum of several terms, accumulated in float32 (float64 for "
               "float64 data) in a fixed canonical order and rounded at each step: the numpy "
               "and c targets keep that order and give the reference's bits; onnxruntime sums "
               "in its own order and is held to a tolerance.",
    "transcendental": "a transcendental function (exp, log, tanh, ...) is evaluated in float64 "
                      "and rounded once: a target using another math library (the c target's "
                      "libm) may differ by a few ulps, and `gradc check` allows that.",
}


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


class _Derived:
    def __repr__(self) -> str:
        return "DERIVED"


REQUIRED: Any = _Required()  # the attribute must be given
DERIVED: Any = _Derived()  # when omitted, ``infer`` computes it from the operands


@dataclass(frozen=True)
class PerAxis:
    """A default of one ``value`` per axis the attribute covers (``(1,) * rank``)."""

    value: Any


@dataclass(frozen=True)
class Attr:
    """One attribute of an op: its name, kind (how ``Checker`` reads it) and default.

    Kinds: ``ints``, ``dims`` (ints or symbol names), ``floats``, ``choice`` (one of the names
    in ``choices``), ``bool``, ``scalar`` (a number converted to the operand's dtype), ``dtype``
    and ``array`` (a tensor literal). The default is ``REQUIRED``, ``DERIVED``, a ``PerAxis``
    fill or a plain value.
    """

    name: str
    kind: str
    default: Any = REQUIRED
    choices: tuple[str, ...] = ()  # the names a ``choice`` attribute accepts

    @property
    def required(self) -> bool:
        """True when the attribute has no default."""
        return self.default is REQUIRED


class OpDef:
    """One operator: operands, attributes, traits, roles, inference, reference and VJP rule.

    Subclasses set ``name``, ``operands``, ``attributes`` (the schema, in argument order: the
    builders, the printer and the checks read it) and ``traits``, and implement ``infer``
    (checks the arguments, raising at the first that is wrong, normalizes attributes, returns
    result types) and ``reference`` (NumPy arrays in, list of arrays out). ``vjp`` builds the
    gradient nodes. Roles that generic code asks instead of comparing op names:

    - ``anchor_operand``: for a gradient op that anchors a fused group, the operand its
      prologue computes (the incoming gradient); its other operands stay body inputs.
    - ``dtypes``: the dtype table of the first operand (``common.py``'s tables).
    - ``promote_scalars``: the builder turns a Python or NumPy number operand into a constant
      of the other operand's dtype (``add(x, 1.0)``).
    - ``nan_from``: the operands whose NaNs can reach the result, if the op never makes a NaN
      of its own (``()``: the result is never NaN); None when unknown.
    - ``no_negative_zero``: result dtypes for which the result never holds -0.0 nor a
      signalling NaN, so that adding +0 gives it back bit for bit.
    - ``shape_operands``: operands of which only the shape matters (``expand``'s ``like``);
      a kernel never reads their elements.
    - ``numerics``: the op's numerics class, a key of ``NUMERICS`` (``exact``, ``summing``,
      ``transcendental``). Every op declares one (``tests/test_docs.py`` checks it);
      ``transcendental = True`` implies ``numerics = "transcendental"`` and the other way round.
    - ``transcendental``: the result comes from a transcendental function: a target using
      another library than the reference's NumPy (the C target's libm) may differ by a few
      ulps, so ``gradc check`` holds it to a tolerance there.
    - ``neutral_operands``: optional operands that may be left out before a later one that is
      given (``mean_variance_normalization``'s scale when only a bias is): the builder passes
      a constant of this value in their place (the first operand's dtype, shape ``(1,)``),
      which leaves the result as without it (a product by 1 is exact).
    - ``raises_input_error``: the op checks its operands' values when it runs (``gather``'s
      indices) and raises ``InputError`` without producing anything; a target that writes
      state in place runs every such op before its first write.
    """

    name: ClassVar[str]
    operands: ClassVar[tuple[str, ...]]
    attributes: ClassVar[tuple[Attr, ...]] = ()
    traits: ClassVar[frozenset[str]] = PURE
    variadic: ClassVar[bool] = False  # one operand, a sequence of values (``join``'s inputs)
    tuple_results: ClassVar[bool] = False  # the builder returns a tuple even of one result
    anchor_operand: ClassVar[str | None] = None
    dtypes: ClassVar[tuple[DType, ...]] = ()
    promote_scalars: ClassVar[bool] = False
    nan_from: ClassVar[tuple[str, ...] | None] = None
    no_negative_zero: ClassVar[frozenset[DType]] = frozenset()
    shape_operands: ClassVar[tuple[str, ...]] = ()
    transcendental: ClassVar[bool] = False
    numerics: ClassVar[str | None] = None  # a key of NUMERICS; None: not declared yet
    # Trailing operands that may be left out (``convolution``'s bias, ``gemm``'s c): the
    # builder takes None for them and the node then has fewer inputs.
    optional_operands: ClassVar[tuple[str, ...]] = ()
    neutral_operands: ClassVar[Mapping[str, float]] = {}
    raises_input_error: ClassVar[bool] = False

    @property
    def anchors(self) -> bool:
        """True when the op anchors a fused group (its kind is the op's name)."""
        return self.anchor_operand is not None

    @property
    def gradient_index(self) -> int:
        """The position of ``anchor_operand`` among the operands."""
        if self.anchor_operand is None:
            raise GradcError(f"internal error: {self.name} anchors no fused group")
        return self.operands.index(self.anchor_operand)

    def value_operands(self, node: Node) -> list[Value]:
        """The operands of ``node`` whose elements the op reads (all but ``shape_operands``)."""
        if not self.shape_operands:
            return list(node.inputs)
        names = self.operands if not self.variadic else ()
        return [v for i, v in enumerate(node.inputs)
                if i >= len(names) or names[i] not in self.shape_operands]

    def value_range(self, attrs: Mapping[str, Any],
                    dtype: DType) -> tuple[float, float] | None:
        """Bounds on the result's non-NaN elements that hold for any operands, if known."""
        return None

    def infer(self, c: "Checker") -> list[TensorType]:
        raise NotImplementedError

    # Each op takes its own operands (NumPy arrays), so the signature is left open here.
    def reference(self, attrs: Mapping[str, Any], *args: Any, **kwargs: Any) -> list[np.ndarray]:
        raise NotImplementedError

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """Gradients of the node's inputs given the gradients of its outputs (None = zero)."""
        raise NotImplementedError(f"{self.name} has no gradient rule")


def register(cls: type[OpDef]) -> type[OpDef]:
    """Class decorator: instantiate an OpDef and add it to the registry under its name."""
    if cls.name in REGISTRY:
        raise RuntimeError(f"operator {cls.name} is defined twice")
    unknown = cls.traits - TRAITS
    if unknown:
        raise RuntimeError(f"operator {cls.name}: unknown traits {sorted(unknown)}")
    if not set(cls.neutral_operands) <= set(cls.optional_operands):
        raise RuntimeError(f"operator {cls.name}: neutral_operands must be optional operands")
    if cls.anchor_operand is not None and cls.anchor_operand not in cls.operands:
        raise RuntimeError(f"operator {cls.name}: anchor_operand {cls.anchor_operand!r} is not "
                           "an operand")
    _settle_numerics(cls)
    REGISTRY[cls.name] = cls()
    return cls


def _settle_numerics(cls: type[OpDef]) -> None:
    """Make ``numerics`` and ``transcendental`` agree (either one implies the other)."""
    if cls.transcendental and "numerics" not in vars(cls):  # over a base class's class
        cls.numerics = "transcendental"
    if cls.numerics is not None and cls.numerics not in NUMERICS:
        raise RuntimeError(f"operator {cls.name}: numerics {cls.numerics!r} is not one of "
                           f"{sorted(NUMERICS)}")
    if cls.transcendental != (cls.numerics == "transcendental"):
        if cls.transcendental:
            raise RuntimeError(f"operator {cls.name}: transcendental, but numerics "
                               f"{cls.numerics!r}")
        cls.transcendental = True


def get_op(name: str) -> OpDef:
    """The definition of a registered op; VerifyError for an unknown name."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise VerifyError(f"{name}: op: expected a registered operator, got unknown op "
                          f"{name!r}") from None


_MISSING = object()


def _is_int(v: object) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


class Checker:
    """Checks an op's arguments in order and collects the normalized attributes."""

    def __init__(self, op: str, types: Mapping[str, TensorType], raw: Mapping[str, Any],
                 schema: Sequence[Attr] | None = None) -> None:
        self.op = op
        self.types = dict(types)
        self.raw = dict(raw)
        self.attrs: dict[str, Any] = {}
        self.schema = None if schema is None else {a.name: a for a in schema}

    # -- failures ---------------------------------------------------------------------
    def fail(self, field: str, expected: str, got: object) -> NoReturn:
        """Raise the SPEC.md §1.5 error: ``<op>: <field>: expected <what>, got <given>``."""
        raise VerifyError(f"{self.op}: {field}: expected {expected}, got {show_value(got)}")

    def finish(self) -> None:
        """Reject arguments the op does not take."""
        for k in self.raw:
            if k not in self.attrs:
                self.fail(k, "no such argument", show_value(self.raw[k], repr))

    # -- tensors ----------------------------------------------------------------------
    def t(self, operand: str) -> TensorType:
        """The type of an operand."""
        return self.types[operand]

    def dtype_in(self, operand: str, allowed: Sequence[DType]) -> DType:
        """Check that an operand's dtype is one of ``allowed``."""
        d = self.t(operand).dtype
        if d not in allowed:
            self.fail(f"{operand}.dtype", "one of " + ", ".join(a.value for a in allowed), d)
        return d

    def rank_in(self, operand: str, lo: int, hi: int) -> int:
        """Check that an operand's rank is within [lo, hi]."""
        r = self.t(operand).rank
        if not lo <= r <= hi:
            self.fail(f"{operand}.rank", f"{lo}..{hi}" if lo != hi else str(lo), r)
        return r

    def same_dtype(self, operand: str, ref: str) -> None:
        """Check that an operand has the dtype of ``ref``."""
        a, b = self.t(operand).dtype, self.t(ref).dtype
        if a != b:
            self.fail(f"{operand}.dtype", f"{b} (same as {ref})", a)

    def same_shape(self, operand: str, ref: str) -> None:
        """Check that an operand has the shape of ``ref`` (dims compared as written)."""
        a, b = self.t(operand).shape, self.t(ref).shape
        if a != b:
            self.fail(f"{operand}.shape", f"{fmt_shape(b)} (same as {ref})", fmt_shape(a))

    def static_dims(self, operand: str, axes: Sequence[int]) -> tuple[int, ...]:
        """Check that the given dims of an operand are ints, not symbols (SPEC.md §1.4)."""
        shape = self.t(operand).shape
        out = []
        for a in axes:
            d = shape[a]
            if isinstance(d, str):
                self.fail(f"{operand}.shape[{a}]", "a static size", show_value(d, repr))
            out.append(d)
        return tuple(out)

    # -- attributes -------------------------------------------------------------------
    def _get(self, name: str, default: Any, length: int | None = None) -> Any:
        """The raw value, else the default: the caller's (a derived one), else the schema's."""
        if self.schema is not None and name not in self.schema:
            raise GradcError(f"internal error: {self.op}: {name} is not in the op's schema")
        v = self.raw.get(name, None)
        if v is None and default is _MISSING:
            default = self._schema_default(name, length)
        if v is None:
            if default is _MISSING:
                self.fail(name, "a value (required argument)", "none")
            v = default() if callable(default) else default
        return v

    def _schema_default(self, name: str, length: int | None) -> Any:
        if self.schema is None:
            return _MISSING
        a = self.schema[name]
        if a.default is REQUIRED:
            return _MISSING
        if a.default is DERIVED:
            raise GradcError(f"internal error: {self.op}: {name} is derived, but infer gave "
                             "no default")
        if isinstance(a.default, PerAxis):
            if length is None:
                raise GradcError(f"internal error: {self.op}: {name}: a per-axis default "
                                 "needs a length")
            return (a.default.value,) * length
        return a.default

    def ordered(self) -> dict[str, Any]:
        """The normalized attributes in schema order (the order of the builder's arguments)."""
        if self.schema is None:
            return self.attrs
        lost = [k for k in self.schema if k not in self.attrs]
        extra = [k for k in self.attrs if k not in self.schema]
        if lost or extra:
            raise GradcError(f"internal error: {self.op}: infer normalized {sorted(self.attrs)}, "
                             f"the schema says {list(self.schema)}")
        return {k: self.attrs[k] for k in self.schema}

    def _seq(self, name: str, v: Any, length: int | None) -> list:
        if isinstance(v, np.ndarray):
            v = v.tolist()
        if not isinstance(v, (list, tuple)):
            self.fail(name, "a list of numbers", show_value(v, repr))
        if length is not None and len(v) != length:
            self.fail(name, f"{length} values (one per axis)", f"{len(v)} values")
        return list(v)

    def length(self, name: str, length: int) -> None:
        """Check only that a required array argument has the given length."""
        self._seq(name, self._get(name, _MISSING, length), length)

    def ints(self, name: str, length: int | None, lo: int | None = None,
             default: Any = _MISSING, what: str | None = None) -> tuple[int, ...]:
        """An integer array of the given length whose entries are >= lo."""
        vals = self._seq(name, self._get(name, default, length), length)
        for i, v in enumerate(vals):
            if not _is_int(v):
                self.fail(f"{name}[{i}]", "an integer", show_value(v, repr))
            if not INT64_MIN <= int(v) <= INT64_MAX:
                self.fail(f"{name}[{i}]", "an integer in int64's range", int(v))
            if lo is not None and int(v) < lo:
                self.fail(f"{name}[{i}]", what or f"an integer >= {lo}", int(v))
        out = tuple(int(v) for v in vals)
        self.attrs[name] = out
        return out

    def dims(self, name: str, default: Any = _MISSING) -> tuple[Dim, ...]:
        """An array of dims: ints (or -1, resolved by the op) or symbol names."""
        vals = self._seq(name, self._get(name, default), None)
        for i, v in enumerate(vals):
            if not (_is_int(v) or (isinstance(v, str) and v)):
                self.fail(f"{name}[{i}]", "an integer or a symbol name", show_value(v, repr))
            if _is_int(v) and not -1 <= int(v) <= MAX_DIM:
                self.fail(f"{name}[{i}]", "an integer in [-1, 2**63 - 1] or a symbol name",
                          int(v))
        out = tuple(v if isinstance(v, str) else int(v) for v in vals)
        self.attrs[name] = out
        return out

    def floats(self, name: str, length: int, default: Any = _MISSING,
               positive: bool = False) -> tuple[float, ...]:
        """A float array, each entry rounded once to float32 and finite (and > 0)."""
        vals = self._seq(name, self._get(name, default, length), length)
        out = []
        for i, v in enumerate(vals):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.number)):
                self.fail(f"{name}[{i}]", "a real number", show_value(v, repr))
            f = _round_to(np.float32, v)
            if not math.isfinite(f):
                self.fail(f"{name}[{i}]", "a finite float32", f"{show_value(v)} (rounds to {f})")
            if positive and not f > 0:
                self.fail(f"{name}[{i}]", "a finite float32 > 0", show_value(v))
            out.append(f)
        self.attrs[name] = tuple(out)
        return tuple(out)

    def choice(self, name: str, options: Sequence[str] | None = None,
               default: Any = _MISSING) -> str:
        """One of the given lowercase names (by default the schema's ``choices``)."""
        if options is None:
            if self.schema is None or not self.schema[name].choices:
                raise GradcError(f"internal error: {self.op}: {name} declares no choices")
            options = self.schema[name].choices
        v = self._get(name, default)
        if not isinstance(v, str) or v not in options:
            self.fail(name, " or ".join(f'"{o}"' for o in options), show_value(v, repr))
        self.attrs[name] = v
        return v

    def boolean(self, name: str, default: Any = _MISSING) -> bool:
        """A bool."""
        v = self._get(name, default)
        if not isinstance(v, (bool, np.bool_)):
            self.fail(name, "a bool", show_value(v, repr))
        self.attrs[name] = bool(v)
        return bool(v)

    def scalar(self, name: str, dtype: DType) -> float | int:
        """A clip bound converted to ``dtype`` as SPEC.md §1.3 says."""
        v = self._get(name, _MISSING)
        if isinstance(v, np.ndarray) and v.ndim == 0:
            v = v.item()
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.number)):
            self.fail(name, f"a number convertible to {dtype}", show_value(v, repr))
        if dtype.is_float:
            if v != v:
                self.fail(name, f"a number convertible to {dtype} (not NaN)", "nan")
            out: float | int = _round_to(dtype.numpy.type, v)
        else:
            info = np.iinfo(dtype.numpy)
            if isinstance(v, (float, np.floating)) and not float(v).is_integer():
                self.fail(name, f"an integral value for {dtype}", show_value(v, repr))
            iv = int(v)
            if not info.min <= iv <= info.max:
                self.fail(name, f"a value in [{info.min}, {info.max}] for {dtype}", iv)
            out = iv
        self.attrs[name] = out
        return out

    def dtype_attr(self, name: str) -> DType:
        """A dtype name."""
        v = self._get(name, _MISSING)
        try:
            d = DType.of(v)
        except VerifyError:
            self.fail(name, "a dtype name", show_value(v, repr))
        self.attrs[name] = d
        return d

    def keep(self, name: str, value: Any) -> Any:
        """Store an attribute validated by the op itself."""
        self.attrs[name] = value
        return value


def fmt_shape(shape: Sequence[Dim]) -> str:
    """A shape as ``(2, N, 3)``."""
    return "(" + ", ".join(str(d) for d in shape) + ")"


def infer_node(op: str, in_types: Sequence[TensorType],
               attrs: Mapping[str, Any]) -> tuple[OpDef, dict[str, Any], list[TensorType]]:
    """Run an op's checks on operand types and raw attributes: (definition, attrs, types)."""
    d = get_op(op)
    least = len(d.operands) - len(d.optional_operands)
    if not d.variadic and not least <= len(in_types) <= len(d.operands):
        count = str(least) if least == len(d.operands) else f"{least}..{len(d.operands)}"
        raise VerifyError(f"{op}: operands: expected {count} "
                          f"({', '.join(d.operands)}), got {len(in_types)}")
    names = d.operands if not d.variadic else \
        tuple(f"{d.operands[0]}[{i}]" for i in range(len(in_types)))  # "inputs[1].shape"
    c = Checker(op, dict(zip(names, in_types)), attrs, d.attributes)
    out = d.infer(c)
    c.finish()
    return d, c.ordered(), out


def _operand_label(op: str, i: int) -> str:
    """``operand 1 (rhs)``: an operand's position and schema name, for messages."""
    d = REGISTRY.get(op)
    if d is None or not d.operands:
        return f"operand {i}"
    name = f"{d.operands[0]}[{i}]" if d.variadic else \
        d.operands[i] if i < len(d.operands) else None
    return f"operand {i}" + (f" ({name})" if name else "")


def _target_graph(op: str, inputs: Sequence[Value], graph: Graph | None) -> Graph | None:
    """The graph a new node joins: its operands' (all one graph), else ``graph``, else the
    ``with graph:`` block's, else none yet (the first user adopts it)."""
    owner, first = graph, "the graph given" if graph is not None else ""
    for i, v in enumerate(inputs):
        if v.graph is None:
            continue
        if owner is None:
            owner, first = v.graph, _operand_label(op, i)
        elif v.graph is not owner:
            raise VerifyError(f"{op}: {_operand_label(op, i)}: expected a value of graph "
                              f"{owner.name!r} (that of {first}), got %{v.name} of graph "
                              f"{v.graph.name!r}")
    return owner if owner is not None else current_graph()


def make_node(op: str, inputs: Sequence[Any], attrs: Mapping[str, Any],
              graph: Graph | None = None) -> Any:
    """Check, infer and append a node; returns its result value (a tuple if several)."""
    for i, v in enumerate(inputs):
        if not isinstance(v, Value):
            raise VerifyError(f"{op}: operand {i}: expected a gradc value, got "
                              f"{type(v).__name__}")
    g = _target_graph(op, inputs, graph)
    d, norm, types = infer_node(op, [v.type for v in inputs], attrs)
    if g is not None:
        for i, v in enumerate(inputs):  # values made without a graph join the first user's
            adopt(g, v, f"{op}: {_operand_label(op, i)}")
    node = Node(op, inputs, norm, types)
    if g is not None:
        g.append(node)
    return node.outputs[0] if len(node.outputs) == 1 else node.outputs


def apply(op: str, *inputs: Value, **attrs: Any) -> Any:
    """``make_node`` with keyword attributes: ``apply("relu", x)``."""
    return make_node(op, inputs, attrs)


OpBuilder = Callable[..., Any]


def show_value(v: object, fmt: Callable[[object], str] = str, limit: int = 200) -> str:
    """A value for an error message: huge integers by their size (Python refuses to print
    one of more than 4,300 digits), anything else shortened to ``limit`` characters."""
    if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
        n = int(v)
        return str(n) if abs(n) < 10 ** 40 else f"an integer of {n.bit_length()} bits"
    if isinstance(v, (list, tuple)):
        inner = ", ".join(show_value(x, fmt, limit) for x in v[:64])
        text = f"[{inner}{', ...' if len(v) > 64 else ''}]" if isinstance(v, list) else \
            f"({inner}{',' if len(v) == 1 else ''}{', ...' if len(v) > 64 else ''})"
    else:
        try:
            text = fmt(v)
        except ValueError:  # an object holding a huge int
            text = f"<{type(v).__name__}>"
    return text if len(text) <= limit else text[:limit] + "..."


def _round_to(ftype: Any, v: Any) -> float:
    """``v`` rounded to a float type; beyond its range (even beyond float64's, as for
    ``10**400``) it becomes +-inf, as IEEE rounding to nearest gives (SPEC.md §1.3)."""
    try:
        with np.errstate(over="ignore"):
            return float(ftype(v))
    except OverflowError:
        return math.inf if v > 0 else -math.inf
