"""Parser of the text IR written by ``gradc.ir.printer``; every error is a ``ParseError``."""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

import numpy as np

from gradc.errors import GradcError, ParseError
from gradc.ir.core import Graph, Node, Value, parameter_array
from gradc.ir.types import MAX_DIM, DType, TensorType, element_count
from gradc.ir.fused import infer_fused
from gradc.ir.ops.registry import infer_node

_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r\n]+|\#[^\n]*)
  | (?P<value>%(?:[A-Za-z_][A-Za-z0-9_.]*|[0-9]+|"(?:[^"\\\n]|\\.)*"))
  | (?P<number>[-+]?(?:(?:inf|nan)(?![A-Za-z0-9_.])  # not the start of a name: inf_grad
                     |(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?))
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<ident>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<punct>[(){}\[\],:=<>])
""", re.VERBOSE)
MAX_DEPTH = 16
MAX_INT_DIGITS = 40  # far beyond any int64/uint64 value; Python refuses str->int over 4300


class _Tok:
    __slots__ = ("kind", "text", "line", "col")

    def __init__(self, kind: str, text: str, line: int, col: int) -> None:
        self.kind, self.text, self.line, self.col = kind, text, line, col


def tokenize(text: str) -> list[_Tok]:
    """Split text into tokens with 1-based line and column."""
    toks, pos, line, line_start = [], 0, 1, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ParseError(f"unexpected character {text[pos]!r}", line, pos - line_start + 1)
        kind = m.lastgroup or ""
        if kind != "ws":
            toks.append(_Tok(kind, m.group(), line, pos - line_start + 1))
        nl = m.group().count("\n")
        if nl:
            line += nl
            line_start = m.start() + m.group().rindex("\n") + 1
        pos = m.end()
    toks.append(_Tok("eof", "", line, pos - line_start + 1))
    return toks


def _unquote(text: str, tok: _Tok) -> str:
    try:
        s = json.loads(text)
    except ValueError:
        raise ParseError(f"bad string {text}", tok.line, tok.col) from None
    if not isinstance(s, str):
        raise ParseError(f"bad string {text}", tok.line, tok.col)
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ParseError(f"string {text}: expected valid Unicode text, got a lone surrogate "
                         f"U+{ord(s[e.start]):04X}", tok.line, tok.col) from None
    return s


class Parser:
    """Recursive-descent parser over the token list."""

    def __init__(self, text: str, parameters: Mapping[str, Any] | None = None,
                 lenient: bool = False) -> None:
        self.toks = tokenize(text)
        self.i = 0
        self.parameters = parameters
        self.lenient = lenient
        self.used: set[str] = set()

    # -- token helpers ----------------------------------------------------------------
    def peek(self) -> _Tok:
        return self.toks[self.i]

    def next(self) -> _Tok:
        t = self.toks[self.i]
        if t.kind != "eof":
            self.i += 1
        return t

    def error(self, msg: str, tok: _Tok | None = None) -> ParseError:
        tok = tok or self.peek()
        found = repr(tok.text) if tok.kind != "eof" else "end of input"
        return ParseError(f"{msg}, found {found}", tok.line, tok.col)

    def expect(self, text: str) -> _Tok:
        if self.peek().text != text or self.peek().kind in ("string", "value"):
            raise self.error(f"expected {text!r}")
        return self.next()

    def accept(self, text: str) -> bool:
        if self.peek().text == text and self.peek().kind not in ("string", "value"):
            self.next()
            return True
        return False

    def name_of(self, tok: _Tok) -> str:
        body = tok.text[1:]
        return _unquote(body, tok) if body.startswith('"') else body

    def ident_or_string(self, what: str) -> str:
        t = self.next()
        if t.kind == "ident":
            return t.text
        if t.kind == "string":
            return _unquote(t.text, t)
        raise self.error(f"expected {what}", t)

    # -- grammar ----------------------------------------------------------------------
    def parse_type(self) -> TensorType:
        t = self.next()
        if t.kind != "ident":
            raise self.error("expected a type such as f32[2,3]", t)
        try:
            dtype = DType.of(t.text)
        except GradcError:
            raise self.error("expected a dtype name", t) from None
        self.expect("[")
        dims: list[Any] = []
        while not self.accept("]"):
            if dims:
                self.expect(",")
            d = self.next()
            if d.kind == "number" and re.fullmatch(r"[0-9]+", d.text):
                n = self.parse_number(d)
                if not 1 <= n <= MAX_DIM:
                    raise self.error("expected a dim in [1, 2**63 - 1]", d)
                dims.append(n)
            elif d.kind in ("ident", "string") and d.text not in ("inf", "nan"):
                dims.append(d.text if d.kind == "ident" else _unquote(d.text, d))
                if not dims[-1]:
                    raise self.error("expected a non-empty symbol", d)
            else:
                raise self.error("expected a dim (an integer >= 1 or a symbol)", d)
            if len(dims) > 64:
                raise self.error("too many dims")
        try:
            return TensorType(dtype, tuple(dims))
        except GradcError as e:
            raise ParseError(str(e), t.line, t.col) from None

    def parse_number(self, tok: _Tok) -> int | float:
        text = tok.text
        if re.fullmatch(r"[-+]?[0-9]+", text):
            if len(text.lstrip("+-").lstrip("0")) > MAX_INT_DIGITS:
                raise ParseError(f"integer literal of {len(text)} characters is out of range "
                                 f"(at most {MAX_INT_DIGITS} digits)", tok.line, tok.col)
            return int(text)
        return float(text)

    def parse_attr(self, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise self.error("attribute nested too deeply")
        t = self.next()
        if t.kind == "number":
            return self.parse_number(t)
        if t.kind == "string":
            return _unquote(t.text, t)
        if t.text == "[" and t.kind == "punct":
            items: list[Any] = []
            while not self.accept("]"):
                if items:
                    self.expect(",")
                items.append(self.parse_attr(depth + 1))
            return items
        if t.kind == "ident":
            if t.text in ("true", "false"):
                return t.text == "true"
            if t.text == "array":
                return self.parse_array()
            try:
                return DType.of(t.text)
            except GradcError:
                raise self.error("expected an attribute value", t) from None
        raise self.error("expected an attribute value", t)

    def parse_array(self) -> np.ndarray:
        start = self.peek()
        self.expect("<")
        t = self.parse_type()
        if not t.is_static:
            raise self.error("expected a static array type", start)
        self.expect(":")
        dt = t.dtype.numpy
        shape = [int(d) for d in t.shape]
        count = element_count(shape)
        if self.accept("hex"):
            s = self.next()
            if s.kind != "string":
                raise self.error("expected a hex string", s)
            try:
                raw = bytes.fromhex(_unquote(s.text, s))
            except ValueError:
                raise self.error("expected a hex string", s) from None
            if len(raw) != count * dt.itemsize:
                raise self.error(f"expected {count * dt.itemsize} bytes of data", s)
            a = np.frombuffer(raw, dt.newbyteorder("<")).astype(dt)
        else:
            vals = self.parse_attr(1)
            if not isinstance(vals, list) or len(vals) != count:
                raise self.error(f"expected a list of {count} values", start)
            try:
                with np.errstate(over="ignore"):
                    a = np.array(vals, dtype=dt) if vals else np.zeros(0, dt)
            except (TypeError, ValueError, OverflowError):
                raise self.error(f"expected values of {t.dtype}", start) from None
        self.expect(">")
        return a.reshape(shape)

    def parse_graph(self, depth: int = 0) -> Graph:
        if depth > MAX_DEPTH:
            raise self.error("graphs nested too deeply")
        self.expect("graph")
        g = Graph(self.ident_or_string("a graph name"))
        env: dict[str, Value] = {}
        self.expect("(")
        while not self.accept(")"):
            if g.inputs:
                self.expect(",")
            tok = self.next()
            if tok.kind != "value":
                raise self.error("expected an input such as %x", tok)
            self.expect(":")
            typ = self.parse_type()
            name = self.name_of(tok)
            if name in env:
                raise ParseError(f"value %{name} is defined twice", tok.line, tok.col)
            env[name] = g.input(name, typ.dtype, typ.shape)
        self.expect("{")
        while not (self.peek().kind == "ident" and self.peek().text == "return"):
            if self.peek().kind == "ident" and self.peek().text == "param":
                self.parse_parameter(g, env, depth)
            else:
                self.parse_node(g, env, depth)
        self.next()
        outs: list[Value] = []
        while self.peek().kind == "value":
            if outs:
                raise self.error("expected ','")
            outs.append(self.lookup(env, self.next()))
            while self.accept(","):
                outs.append(self.lookup(env, self.next()))
        self.expect("}")
        for v in outs:
            g.output(v)
        return g

    def parse_parameter(self, g: Graph, env: dict[str, Value], depth: int) -> None:
        """``param %name: type``; the value comes from the ``parameters`` mapping."""
        start = self.next()
        if depth > 0:
            raise ParseError("a fused body has no parameters", start.line, start.col)
        tok = self.next()
        if tok.kind != "value":
            raise self.error("expected a parameter such as %w", tok)
        self.expect(":")
        typ = self.parse_type()
        name = self.name_of(tok)
        if name in env:
            raise ParseError(f"value %{name} is defined twice", tok.line, tok.col)
        if self.parameters is None or (self.lenient and name not in self.parameters):
            env[name] = g.add_parameter(name, None, typ)  # no value: a call must pass one
            return
        if name not in self.parameters:
            raise ParseError(f"parameter %{name}: no value given in parameters", tok.line,
                             tok.col)
        try:
            a = parameter_array(self.parameters[name], f"parameter %{name}")
        except GradcError as e:
            raise ParseError(str(e), tok.line, tok.col) from None
        given = np.asarray(self.parameters[name])
        if given.dtype != typ.dtype.numpy or a.shape != typ.shape:
            raise ParseError(f"parameter %{name}: value: expected a {typ.dtype} array of shape "
                             f"{typ.shape}, got {given.dtype} of shape {a.shape}",
                             tok.line, tok.col)
        self.used.add(name)
        env[name] = g.add_parameter(name, a)

    def lookup(self, env: dict[str, Value], tok: _Tok) -> Value:
        if tok.kind != "value":
            raise self.error("expected a value such as %x", tok)
        name = self.name_of(tok)
        if name not in env:
            raise ParseError(f"value %{name} is not defined", tok.line, tok.col)
        return env[name]

    def parse_node(self, g: Graph, env: dict[str, Value], depth: int) -> None:
        start = self.peek()
        results = [self.next()]
        while self.accept(","):
            results.append(self.next())
        for r in results:
            if r.kind != "value":
                raise self.error("expected a result such as %y", r)
        self.expect("=")
        op_tok = self.next()
        if op_tok.kind != "ident":
            raise self.error("expected an op name", op_tok)
        self.expect("(")
        args: list[Value] = []
        while not self.accept(")"):
            if args:
                self.expect(",")
            args.append(self.lookup(env, self.next()))
        attrs: dict[str, Any] = {}
        if self.accept("{"):
            while not self.accept("}"):
                if attrs:
                    self.expect(",")
                key = self.next()
                if key.kind != "ident":
                    raise self.error("expected an attribute name", key)
                self.expect("=")
                if key.text in attrs:
                    raise ParseError(f"attribute {key.text} is given twice", key.line, key.col)
                attrs[key.text] = self.parse_attr()
        self.expect(":")
        types = [self.parse_type()]
        while self.accept(","):
            types.append(self.parse_type())
        body = self.parse_graph(depth + 1) if self.peek().text == "graph" else None
        node = build_node(op_tok.text, args, attrs, body, types, start)
        for r, v in zip(results, node.outputs):
            name = self.name_of(r)
            if name in env:
                raise ParseError(f"value %{name} is defined twice", r.line, r.col)
            v.name = name
            env[name] = v
        try:
            g.append(node)
        except GradcError as e:
            raise ParseError(str(e), start.line, start.col) from None


def build_node(op: str, args: list[Value], attrs: dict[str, Any], body: Graph | None,
               types: list[TensorType], tok: _Tok) -> Node:
    """Check a parsed statement against the op's definition and make the node."""
    try:
        if body is not None:
            norm, inferred = infer_fused(op, args, attrs, body)
        else:
            _, norm, inferred = infer_node(op, [a.type for a in args], attrs)
    except GradcError as e:
        raise ParseError(str(e), tok.line, tok.col) from None
    if inferred != types:
        shown = ", ".join(str(t) for t in types)
        want = ", ".join(str(t) for t in inferred)
        raise ParseError(f"{op}: result type: expected {want}, got {shown}", tok.line, tok.col)
    return Node(op, args, norm, inferred, body=body)


def parse(text: str, parameters: Mapping[str, Any] | None = None) -> Graph:
    """Parse one graph from its text form; raises ``ParseError`` with line and column.

    ``parameters`` maps each ``param`` of the text to its value (the text holds no values).
    Without it, parameters have no value (``.value`` is None): the graph can be printed,
    optimized, differentiated and compiled, and each call of its Executable passes them.
    """
    return parse_text(text, parameters)


def parse_text(text: str, parameters: Mapping[str, Any] | None = None,
               extra_parameters: bool = False) -> Graph:
    """``parse``; with ``extra_parameters``, values of names the text lacks are ignored and a
    parameter missing from ``parameters`` has no value."""
    if not isinstance(text, str):
        raise ParseError(f"expected text, got {type(text).__name__}")
    if parameters is not None and not isinstance(parameters, Mapping):
        raise ParseError(f"parameters: expected a mapping of names to arrays, got "
                         f"{type(parameters).__name__}")
    try:
        p = Parser(text, parameters, extra_parameters)
        g = p.parse_graph()
        if p.peek().kind != "eof":
            raise p.error("expected end of input")
        extra = sorted(set(p.parameters or ()) - p.used, key=str)
        if extra and not extra_parameters:
            raise ParseError(f"parameters: {extra[0]!r} is not a parameter of graph {g.name!r}")
    except ParseError:
        raise
    except GradcError as e:
        raise ParseError(str(e)) from None
    except RecursionError:
        raise ParseError("input nested too deeply") from None
    return g
