"""Token- and line-level mutations of gradc's text IR.

The text is split into tokens that keep their exact spelling (``tokens``; joining them gives the
text back), so a mutation changes one thing and leaves the rest as the printer wrote it:
numbers become boundary values, dtypes change, values are renamed (consistently or not) to
keywords, ``self``, unicode or lone surrogates, lines are swapped, duplicated, deleted or spliced
in from another graph, attributes are dropped or duplicated, and so on.
"""

from __future__ import annotations

import json
import random
import re
from typing import Callable

from fuzz.graphgen import HOSTILE_NAMES

_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r\n]+)
  | (?P<value>%(?:[A-Za-z_][A-Za-z0-9_.]*|[0-9]+|"(?:[^"\\\n]|\\.)*"))
  | (?P<number>[-+]?(?:inf|nan|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?))
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<ident>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<other>.)
""", re.VERBOSE | re.DOTALL)

NUMBER_EDGES: tuple[str, ...] = (
    "0", "-1", "1", "2", "-0", "-0.0", "0.0", "16777216", "16777217", "2147483647", "2147483648",
    "4294967296", "1099511627776", "4611686018427387904", "9223372036854775807",
    "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
    "18446744073709551616", "1" + "0" * 4400, "9" * 5000, "-" + "9" * 4301, "nan", "-nan", "inf",
    "-inf", "+inf", "1e400", "-1e400", "1e-400", "4.9e-324", "3.4028235e38", "3.4028236e38",
    "1.7976931348623157e308", "65504.0", "65520.0", "0.1", "1e308", "5e-324", "1.", ".5",
    "0.30000000000000004", "1e", "00012", "1e99999", "123456789012345678901234567890")
DTYPES = ("f64", "f32", "f16", "i64", "i32", "i16", "i8", "u64", "u32", "u16", "u8", "bool",
          "f8", "float32", "i128", "c64")
OPS = ("relu", "relu_grad", "clip", "clip_grad", "slice", "slice_grad", "max_pooling",
       "max_pooling_grad", "resample", "resample_grad", "add", "sub", "mul", "neg", "identity",
       "constant", "reduce_sum", "reshape", "cast", "expand", "fused", "bogus")
GARBAGE = ("{", "}", "(", ")", "[", "]", ",", ":", "=", "<", ">", "%", '"', "\\", "#", "\x00",
           "\ud800", "é", "\n", "graph", "return", "array", "hex", "@", "$", "\t", "ﬀ", "٣")


def tokens(text: str) -> list[tuple[str, str]]:
    """``(kind, text)`` pairs whose texts join to ``text``."""
    return [(m.lastgroup or "other", m.group()) for m in _TOKEN.finditer(text)]


def join(toks: list[tuple[str, str]]) -> str:
    """The text of a token list."""
    return "".join(t for _, t in toks)


def value_ref(name: str) -> str:
    """``%name`` as the printer writes it (quoted when not a plain identifier)."""
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*|[0-9]+", name):
        return "%" + name
    return "%" + json.dumps(name)


class TextMutator:
    """Applies random mutations to a text IR (``mutate``); ``donors`` are texts to splice from."""

    def __init__(self, rng: random.Random, donors: list[str] | None = None) -> None:
        self.rng = rng
        self.donors = donors or []

    def mutate(self, text: str, count: int) -> str:
        """``count`` mutations in a row."""
        ops: list[tuple[Callable[[str], str], int]] = [
            (self.number, 10), (self.dtype, 3), (self.rename_all, 3), (self.rename_one, 2),
            (self.swap_lines, 2), (self.duplicate_line, 2), (self.delete_line, 2),
            (self.splice, 2), (self.garbage, 2), (self.op_name, 2), (self.drop_attr, 2),
            (self.duplicate_attr, 1), (self.dim, 4), (self.list_length, 3), (self.nest, 1),
            (self.string, 1), (self.symbol, 2),
        ]
        fns, weights = zip(*ops)
        for _ in range(count):
            text = self.rng.choices(fns, weights)[0](text)
        return text

    # -- token mutations -------------------------------------------------------------------
    def _pick(self, toks: list[tuple[str, str]], kinds: tuple[str, ...]) -> int | None:
        idx = [i for i, (k, _) in enumerate(toks) if k in kinds]
        return self.rng.choice(idx) if idx else None

    def number(self, text: str) -> str:
        """A number becomes a boundary value."""
        toks = tokens(text)
        i = self._pick(toks, ("number",))
        if i is None:
            return text
        toks[i] = ("number", self.rng.choice(NUMBER_EDGES))
        return join(toks)

    def dtype(self, text: str) -> str:
        """A dtype name becomes another."""
        toks = tokens(text)
        idx = [i for i, (k, t) in enumerate(toks) if k == "ident" and t in DTYPES]
        if not idx:
            return text
        toks[self.rng.choice(idx)] = ("ident", self.rng.choice(DTYPES))
        return join(toks)

    def _hostile(self) -> str:
        return self.rng.choice(HOSTILE_NAMES + ("", "1", "x.y.z", "return", "%x"))

    def rename_all(self, text: str) -> str:
        """Every use of one value gets a new (often hostile) name."""
        toks = tokens(text)
        names = sorted({t for k, t in toks if k == "value"})
        if not names:
            return text
        old, new = self.rng.choice(names), value_ref(self._hostile())
        return join([(k, new if k == "value" and t == old else t) for k, t in toks])

    def rename_one(self, text: str) -> str:
        """One use of a value names another (or an undefined) value."""
        toks = tokens(text)
        i = self._pick(toks, ("value",))
        if i is None:
            return text
        names = [t for k, t in toks if k == "value"]
        toks[i] = ("value", self.rng.choice(names + [value_ref(self._hostile())]))
        return join(toks)

    def op_name(self, text: str) -> str:
        """An op name becomes another op's."""
        toks = tokens(text)
        idx = [i for i, (k, t) in enumerate(toks) if k == "ident" and t in OPS]
        if not idx:
            return text
        toks[self.rng.choice(idx)] = ("ident", self.rng.choice(OPS))
        return join(toks)

    def garbage(self, text: str) -> str:
        """A token is replaced by, or gets, a stray character or keyword."""
        toks = tokens(text)
        if not toks:
            return self.rng.choice(GARBAGE)
        i = self.rng.randrange(len(toks))
        g = ("other", self.rng.choice(GARBAGE))
        if self.rng.random() < 0.5:
            toks[i] = g
        else:
            toks.insert(i, g)
        return join(toks)

    def dim(self, text: str) -> str:
        """A dim inside ``f32[...]`` becomes huge, zero, negative or a symbol."""
        toks = tokens(text)
        idx = [i for i in range(1, len(toks) - 1) if toks[i][0] == "number"
               and toks[i - 1][1] in ("[", ",") and toks[i + 1][1] in ("]", ",")]
        if not idx:
            return text
        toks[self.rng.choice(idx)] = self.rng.choice((
            ("number", self.rng.choice(("0", "-1", "4294967296", "1099511627776",
                                        "4611686018427387904", "9223372036854775807",
                                        "9223372036854775808", "16777216", "1" + "0" * 30))),
            ("ident", self.rng.choice(("N", "M", "inf", "nan", "graph", "true"))),
            ("string", json.dumps(self._hostile()))))
        return join(toks)

    def list_length(self, text: str) -> str:
        """A list attribute loses or gains an element."""
        toks = tokens(text)
        opens = [i for i, (k, t) in enumerate(toks) if t == "["]
        if not opens:
            return text
        i = self.rng.choice(opens)
        j = i + 1
        while j < len(toks) and toks[j][1] not in ("]", "["):
            j += 1
        if j >= len(toks) or toks[j][1] != "]":
            return text
        if self.rng.random() < 0.5 and j > i + 1:  # drop the last element
            k = j - 1
            while k > i and toks[k][1] != ",":
                k -= 1
            del toks[k if k > i else i + 1:j]
        else:
            toks.insert(j, ("other", ", " if j > i + 1 else ""))
            toks.insert(j + 1, ("number", self.rng.choice(("1", "0", "2", "-1", "N"))))
        return join(toks)

    def nest(self, text: str) -> str:
        """A number becomes a deeply nested list."""
        toks = tokens(text)
        i = self._pick(toks, ("number",))
        if i is None:
            return text
        depth = self.rng.choice((5, 17, 100, 3000))
        toks[i] = ("other", "[" * depth + toks[i][1] + "]" * depth)
        return join(toks)

    def string(self, text: str) -> str:
        """A quoted string gets escapes: surrogates, NUL, bad escapes."""
        toks = tokens(text)
        i = self._pick(toks, ("string",))
        if i is None:
            return text
        toks[i] = ("string", self.rng.choice(('"\\ud800"', '"\\u0000"', '"\\x41"', '"\\q"',
                                              '"' + "a" * 10000 + '"', '"lin\\near"', '""')))
        return join(toks)

    def symbol(self, text: str) -> str:
        """A symbolic dim is renamed (or a static dim becomes one)."""
        toks = tokens(text)
        idx = [i for i in range(1, len(toks) - 1) if toks[i][0] in ("ident", "number")
               and toks[i - 1][1] in ("[", ",") and toks[i + 1][1] in ("]", ",")]
        if not idx:
            return text
        toks[self.rng.choice(idx)] = ("ident", self.rng.choice(("N", "M", "self", "x")))
        return join(toks)

    # -- line mutations --------------------------------------------------------------------
    def _lines(self, text: str) -> list[str]:
        return text.split("\n")

    def swap_lines(self, text: str) -> str:
        """Two lines trade places."""
        lines = self._lines(text)
        if len(lines) < 2:
            return text
        i, j = self.rng.sample(range(len(lines)), 2)
        lines[i], lines[j] = lines[j], lines[i]
        return "\n".join(lines)

    def duplicate_line(self, text: str) -> str:
        """A line appears twice (or many times)."""
        lines = self._lines(text)
        i = self.rng.randrange(len(lines))
        lines[i:i] = [lines[i]] * self.rng.choice((1, 1, 2, 50))
        return "\n".join(lines)

    def delete_line(self, text: str) -> str:
        """A line goes."""
        lines = self._lines(text)
        if len(lines) < 2:
            return text
        del lines[self.rng.randrange(len(lines))]
        return "\n".join(lines)

    def splice(self, text: str) -> str:
        """Lines of another graph come in."""
        if not self.donors:
            return self.duplicate_line(text)
        donor = self._lines(self.rng.choice(self.donors))
        lines = self._lines(text)
        a = self.rng.randrange(len(donor))
        b = min(len(donor), a + self.rng.randint(1, 3))
        i = self.rng.randrange(len(lines))
        lines[i:i + (1 if self.rng.random() < 0.5 else 0)] = donor[a:b]
        return "\n".join(lines)

    def drop_attr(self, text: str) -> str:
        """One ``key = value`` of an attribute list goes."""
        spans = list(re.finditer(r"(?:, )?[A-Za-z_]+ = (?:\[[^\]]*\]|[^,}]+)", text))
        if not spans:
            return text
        m = self.rng.choice(spans)
        return text[:m.start()] + text[m.end():]

    def duplicate_attr(self, text: str) -> str:
        """One ``key = value`` is given twice (or another key is added)."""
        spans = list(re.finditer(r"[A-Za-z_]+ = (?:\[[^\]]*\]|[^,}]+)", text))
        if not spans:
            return text
        m = self.rng.choice(spans)
        extra = m.group() if self.rng.random() < 0.5 else self.rng.choice(
            ("bogus = 1", "min = nan", "output_sizes = [1]", "value = 3", "dtype = f32"))
        return text[:m.end()] + ", " + extra + text[m.end():]


def relu_chain(n: int, dtype: str = "f32") -> str:
    """A text IR chain of ``n`` relu nodes (deep graphs, without building them first)."""
    lines = [f"graph chain(%x: {dtype}[2,3]) {{"]
    prev = "%x"
    for i in range(n):
        lines.append(f"  %{i} = relu({prev}) : {dtype}[2,3]")
        prev = f"%{i}"
    lines += [f"  return {prev}", "}"]
    return "\n".join(lines)
