"""Harness ``call``: compile a small graph, then call the Executable with hostile arguments.

Arguments: wrong dtypes, ranks and shapes; ``np.matrix``, ndarray subclasses (one whose
``__getitem__`` raises, one that refuses ufuncs), masked arrays; non-contiguous, negative-stride,
Fortran-order, read-only, unaligned and byte-swapped arrays; ``np.broadcast_to`` views (also of
2^40 rows); 0-d arrays, NumPy scalars, lists, object arrays, None, strings; extra and missing
names; symbolic dims bound inconsistently; inputs named ``self`` or ``arrays``.

The contract checked: each call returns or raises a ``GradcError``; a call whose arguments are
all valid (ndarrays of the right dtype and shape, whatever their layout or subclass) returns
plain ``numpy.ndarray`` outputs equal to those of plain contiguous copies of the same values,
and leaves its inputs unchanged; a call with an invalid argument raises ``InputError``.

Payload: ``{"graph": {"kind": "text"|"program", ...}, "target": t, "shapes": {...},
"bind": {...}, "args": {name: spec}, "extra": [...], "missing": [...], "seed": s}``.
"""

from __future__ import annotations

import random
from typing import Any, Callable

import numpy as np

import gradc
from gradc.errors import GradcError
from gradc.ir.core import Graph
from gradc.ir.parser import parse

from fuzz.common import Finding
from fuzz.graphgen import BuildCrash, GraphGen, random_array, replay
from fuzz.minimize import ddmin
from fuzz.pipeline import identical
from fuzz.tolerance import index_feeds

VALID_KINDS = ("plain", "matrix", "subclass", "raising", "no_ufunc", "noncontig", "negstride",
               "fortran", "readonly", "unaligned", "broadcast")
EITHER_KINDS = ("masked", "byteswapped")  # InputError, or the plain call's results
INVALID_KINDS = ("wrong_dtype", "wrong_rank", "wrong_shape", "zero_dim", "empty", "list",
                 "scalar", "none", "object", "string", "np_scalar")
UNCHECKED_KINDS = ("inconsistent", "huge_shape", "huge_broadcast")  # only: no crash
KINDS = VALID_KINDS + EITHER_KINDS + INVALID_KINDS + UNCHECKED_KINDS
NAMES = ("self", "arrays", "kwargs", "x", "shapes", "bindings", "graph", "__class__")


class Tracking(np.ndarray):
    """An ndarray subclass that only tags along."""


class Raising(np.ndarray):
    """An ndarray subclass whose indexing raises."""

    def __getitem__(self, key: Any) -> Any:
        raise RuntimeError("Raising.__getitem__ called")


class NoUfunc(np.ndarray):
    """An ndarray subclass that takes part in no ufunc."""

    __array_ufunc__ = None  # type: ignore[assignment]


def _small_graph(rng: random.Random) -> tuple[dict[str, Any], Graph]:
    for _ in range(5):
        gen = GraphGen(rng, edge=0.0, huge=0.0, symbolic=rng.choice((0.0, 0.3, 0.6)),
                       hostile=0.0)
        try:
            for _ in range(rng.choice((1, 2, 3, 4))):
                gen.step()
            if not gen.pool:
                gen.fresh(gen.dtype, gen.shape(1, 3))
            gen.outputs()
        except BuildCrash:  # a builder bug: the ir harness reports those; draw another graph
            continue
        if gen.rec.graph.outputs:
            return gen.rec.program, gen.rec.graph
    program = {"name": "g", "steps": [("input", "x", "float32", (2, 3)), ("op", "relu", [0], {}),
                                      ("output", 1, "y")]}
    return program, replay(program)


def generate(rng: random.Random) -> dict[str, Any]:
    """A small graph, a target and a set of (mostly one) hostile arguments."""
    program, g = _small_graph(rng)
    if rng.random() < 0.15 and g.inputs:  # rename an input to a name that clashes in Python
        steps = program["steps"]
        idx = [i for i, s in enumerate(steps) if s[0] == "input"]
        i = rng.choice(idx)
        steps[i] = ("input", rng.choice(NAMES)) + tuple(steps[i][2:])
        try:
            g = replay(program)
        except GradcError:
            pass
    try:
        graph: dict[str, Any] = {"kind": "text", "text": str(g)}
    except Exception:  # the printer fails: keep the builder calls
        graph = {"kind": "program", "program": program}
    syms: dict[str, int] = {}
    for v in g.inputs:
        for d in v.type.shape:
            if isinstance(d, str):
                syms.setdefault(d, rng.choice((1, 2, 3)))
    shapes = dict(syms) if rng.random() < 0.3 else {}
    args: dict[str, Any] = {}
    for v in g.inputs:
        kind = "plain"
        if rng.random() < 0.5:
            kind = rng.choice(KINDS)
        args[v.name] = {"kind": kind, "seed": rng.getrandbits(32)}
    extra = [rng.choice(NAMES + ("zzz",))] if rng.random() < 0.08 else []
    missing = [rng.choice(list(args))] if args and rng.random() < 0.05 else []
    target = rng.choice(("reference", "numpy", "numpy", "onnx", "onnx", "c"))
    return {"graph": graph, "target": target, "shapes": shapes, "bind": syms, "args": args,
            "extra": extra, "missing": missing, "seed": rng.getrandbits(32)}


def _graph(spec: dict[str, Any]) -> Graph:
    return parse(spec["text"]) if spec["kind"] == "text" else replay(spec["program"])


def _other_dtype(dt: np.dtype) -> np.dtype:
    return np.dtype(np.float64 if dt != np.float64 else np.float32)


def make_arg(kind: str, base: np.ndarray, sym_axes: list[int], seed: int) -> Any:
    """The hostile form ``kind`` of the valid array ``base``."""
    rng = np.random.default_rng(seed)
    if kind == "plain":
        return base
    if kind == "matrix":
        return np.matrix(base) if base.ndim <= 2 else base
    if kind == "subclass":
        return base.view(Tracking)
    if kind == "raising":
        return base.view(Raising)
    if kind == "no_ufunc":
        return base.view(NoUfunc)
    if kind == "masked":
        return np.ma.masked_array(base, mask=rng.random(base.shape) < 0.3)
    if kind == "noncontig":
        if base.ndim == 0:
            return base
        big = np.repeat(base, 2, axis=-1)
        big[..., ::2] = base
        return big[..., ::2]
    if kind == "negstride":
        if base.ndim == 0:
            return base
        return np.flip(np.flip(base, axis=-1).copy(), axis=-1)
    if kind == "fortran":
        return np.asfortranarray(base)
    if kind == "readonly":
        a = base.copy()
        a.flags.writeable = False
        return a
    if kind == "unaligned":
        raw = np.zeros(base.nbytes + 1, np.uint8)
        a = raw[1:].view(base.dtype).reshape(base.shape)
        a[...] = base
        return a
    if kind == "broadcast":
        if base.ndim == 0:
            return base
        return np.broadcast_to(base[..., :1], base.shape) if base.shape[-1] > 0 else base
    if kind == "huge_broadcast":
        shape = list(base.shape)
        for i in (sym_axes or list(range(base.ndim)))[:1]:
            shape[i] = 2 ** 40
        if not shape:
            return base
        one = base.reshape(-1)[:1].reshape((1,) * base.ndim) if base.size else base
        return np.broadcast_to(one, tuple(shape))
    if kind == "wrong_dtype":
        return base.astype(_other_dtype(base.dtype))
    if kind == "byteswapped":
        return base.astype(base.dtype.newbyteorder())
    if kind == "wrong_rank":
        return base[None]
    if kind == "wrong_shape":  # a static dim off by one (a symbolic one may take any size)
        static = [i for i in range(base.ndim) if i not in sym_axes]
        if not static:
            return base[None]
        return np.zeros(tuple(d + (i in static) for i, d in enumerate(base.shape)), base.dtype)
    if kind == "zero_dim":
        return np.asarray(base.reshape(-1)[0] if base.size else 0, base.dtype)
    if kind == "empty":
        return np.zeros((0,) + base.shape[1:] if base.ndim else (0,), base.dtype)
    if kind == "list":
        return base.tolist()
    if kind == "scalar":
        return 1.5
    if kind == "none":
        return None
    if kind == "object":
        return base.astype(object)
    if kind == "string":
        return "abc"
    if kind == "np_scalar":
        return base[()] if base.ndim == 0 else base.dtype.type(1)
    if kind == "inconsistent":
        shape = list(base.shape)
        for i in sym_axes:
            shape[i] += 1
        return np.zeros(shape, base.dtype) if sym_axes else base[None]
    if kind == "huge_shape":
        return np.broadcast_to(np.zeros((), base.dtype), (2 ** 31,) + base.shape[1:])
    raise ValueError(f"unknown argument kind {kind!r}")


def category(kind: str, base: np.ndarray) -> str:
    """``valid``, ``either`` (InputError or right results), ``invalid`` or ``unchecked``."""
    if kind == "matrix":
        return "valid" if base.ndim >= 2 else "invalid"
    if kind in ("np_scalar", "zero_dim") and base.ndim == 0:
        return "valid"
    if kind == "byteswapped" and base.dtype.itemsize == 1:
        return "valid"
    for cat, kinds in (("valid", VALID_KINDS), ("either", EITHER_KINDS),
                       ("invalid", INVALID_KINDS)):
        if kind in kinds:
            return cat
    return "unchecked"


def execute(payload: dict[str, Any]) -> str:
    """Compile, call with plain arrays, then with the hostile arguments; check the contract."""
    try:
        g = _graph(payload["graph"])
        exe = gradc.compile(g, target=payload["target"], shapes=payload["shapes"])
    except GradcError:
        return "refused:compile"
    rng = random.Random(payload["seed"])
    bind = dict(payload["bind"])
    bases: dict[str, np.ndarray] = {}
    axes: dict[str, list[int]] = {}
    for v in g.inputs:
        shape = [bind.get(d, 2) if isinstance(d, str) else d for d in v.type.shape]
        bases[v.name] = random_array(rng, shape, v.type.dtype.value)
        axes[v.name] = [i for i, d in enumerate(v.type.shape) if isinstance(d, str)]
    index_feeds(g, bases, bind, rng)  # gather indices in range mostly (fuzz.tolerance)
    args: dict[str, Any] = {}
    cats = set()
    plain: dict[str, np.ndarray] = {}
    for name, base in bases.items():
        spec = payload["args"].get(name, {"kind": "plain", "seed": 0})
        kind = spec["kind"]
        try:
            args[name] = make_arg(kind, base, axes[name], spec["seed"])
        except (ValueError, MemoryError):  # NumPy cannot make this form of the array
            args[name], kind = base, "plain"
        cat = category(kind, base)
        cats.add(cat)
        # the plain call gets contiguous copies of the same values
        plain[name] = np.array(np.asarray(args[name]), dtype=base.dtype) \
            if cat in ("valid", "either") else base
    try:
        want = exe(**plain)
    except GradcError:
        return "refused:plain-call"
    for name in payload.get("missing", []):
        if name in args:
            del args[name]
            cats.add("invalid")
    for name in payload.get("extra", []):
        if name not in args:
            args[name] = np.zeros(2, np.float32)
            cats.add("invalid")
    kinds = ",".join(sorted({s["kind"] for s in payload["args"].values()} - {"plain"})) or "plain"
    keep = {k: np.array(a, copy=True) for k, a in args.items()
            if isinstance(a, np.ndarray) and 0 not in a.strides[:1] and a.nbytes < 2 ** 26}
    try:
        out = exe(**args)
    except GradcError:
        return "refused:call" if cats - {"valid"} else "refused:valid-arguments"
    if "unchecked" in cats:
        return "ok"
    if "invalid" in cats:
        raise Finding("accepted-bad-input", f"{payload['target']}:{kinds}",
                      f"{payload['target']}: a call with invalid arguments ({kinds}) returned "
                      "instead of raising InputError")
    for k, a in keep.items():
        if not identical(np.asarray(args[k]), a):
            raise Finding("input-modified", f"{payload['target']}:{kinds}",
                          f"the call changed input {k!r} ({kinds})")
    for name, w in want.items():
        got = out.get(name)
        if type(got) is not np.ndarray or not identical(got, w):
            raise Finding("call-mismatch", f"{payload['target']}:{kinds}",
                          f"{payload['target']}: output {name!r} with arguments ({kinds}) is "
                          f"{type(got).__name__} {getattr(got, 'dtype', '')}"
                          f"{list(getattr(got, 'shape', []))}, not the plain call's result")
    return "ok"


def reduce(payload: dict[str, Any], test: Callable[[Any], bool]) -> dict[str, Any]:
    """Plain arguments where possible, no extra/missing names, fewer graph lines."""
    cur = {**payload, "args": dict(payload["args"])}
    for name in list(cur["args"]):
        if cur["args"][name]["kind"] != "plain":
            cand = {**cur, "args": {**cur["args"], name: {"kind": "plain", "seed": 0}}}
            if test(cand):
                cur = cand
    for k in ("extra", "missing"):
        if cur.get(k) and test({**cur, k: []}):
            cur[k] = []
    if cur["graph"]["kind"] == "text":
        lines = cur["graph"]["text"].split("\n")
        kept = ddmin(lines, lambda ls: test({**cur, "graph": {"kind": "text",
                                                              "text": "\n".join(ls)}}))
        cur["graph"] = {"kind": "text", "text": "\n".join(kept)}
    return cur


def files(payload: dict[str, Any]) -> tuple[str, bytes | None, dict[str, Any]]:
    """The whole recipe in the JSON file."""
    return ".json", None, payload


def load(data: bytes | None, meta: dict[str, Any]) -> dict[str, Any]:
    """The recipe as stored."""
    return meta
