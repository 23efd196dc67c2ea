"""A small writer of C text: it owns lines, indentation, blocks and declarations.

Emitters never indent by hand and never balance braces themselves: ``block`` writes ``{`` when
its ``with`` starts and ``}`` when it ends, ``under`` indents the one statement that a brace-less
head (a loop of a collapsed OpenMP nest) owns, and ``nest`` places another writer's text at the
current depth. Modelled on xDSL's ``Printer.descend`` (``with printer.descend(signature) as
inner: ...``, the braces owned by the context) and tinygrad's C renderer (one depth counter).

    w = CWriter()
    with w.block("for (int64_t i = 0; i < n; i++)"):
        w.declare("const float", "t0", "x[i]")
        w.line("y[i] = t0;")
    str(w)  # 'for (int64_t i = 0; i < n; i++) {\\n  const float t0 = x[i];\\n  y[i] = t0;\\n}'
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import Iterator, Sequence

INDENT = "  "
_COLUMN0 = -1  # the depth of preprocessor conditionals: always at the start of the line


class CWriter:
    """Lines of C, each at a nesting depth; ``text()`` (or ``str``) renders them indented."""

    def __init__(self) -> None:
        self._lines: list[tuple[int, str]] = []
        self._depth = 0
        self._scopes: list[set[str]] = [set()]  # names declared in each open block

    def line(self, *lines: str) -> None:
        """Write each string as one line at the current depth."""
        self._lines.extend((self._depth, text) for text in lines)

    def blank(self) -> None:
        """An empty line."""
        self._lines.append((0, ""))

    def comment(self, *lines: str) -> None:
        """A ``/* ... */`` comment, one line per string (never user text: names are not C)."""
        if any("*/" in text for text in lines):
            raise ValueError("CWriter.comment: expected text without '*/'")
        if len(lines) == 1:
            self.line(f"/* {lines[0]} */")
        else:
            self.line(f"/* {lines[0]}", *(f" * {text}".rstrip() for text in lines[1:]), " */")

    def declare(self, ctype: str, name: str, init: str | None = None) -> str:
        """``ctype name = init;`` in the current block; returns ``name``.

        Declaring a name twice in one block is an error here rather than in the C compiler.
        """
        if name in self._scopes[-1]:
            raise ValueError(f"CWriter.declare: {name!r} is already declared in this block")
        self._scopes[-1].add(name)
        self.line(f"{ctype} {name};" if init is None else f"{ctype} {name} = {init};")
        return name

    def label(self, name: str) -> None:
        """A ``goto`` label, one level left of the statements around it."""
        self._lines.append((max(0, self._depth - 1), f"{name}:"))

    @contextmanager
    def _braced(self, opening: str) -> Iterator[None]:
        """``opening`` (ending in ``{``), the ``with`` body one level deeper, then ``}``."""
        self.line(opening)
        self._depth += 1
        self._scopes.append(set())
        try:
            yield
        finally:
            self._scopes.pop()
            self._depth -= 1
            self.line("}")

    @contextmanager
    def block(self, head: str = "") -> Iterator[None]:
        """``head {`` ... ``}`` around the lines of the ``with`` (no head: a bare scope)."""
        with self._braced(f"{head} {{" if head else "{"):
            yield

    @contextmanager
    def blocks(self, heads: Sequence[str]) -> Iterator[None]:
        """One ``block`` per head, nested (a loop nest with braces; no heads: no block)."""
        with ExitStack() as stack:
            for head in heads:
                stack.enter_context(self.block(head))
            yield

    @contextmanager
    def orelse(self, head: str = "else") -> Iterator[None]:
        """Continue the block that was just closed: ``} else {`` (or ``} else if (...) {``)."""
        if not self._lines or self._lines[-1] != (self._depth, "}"):
            raise ValueError("CWriter.orelse: expected to follow a block closed at this depth")
        self._lines.pop()
        with self._braced(f"}} {head} {{"):
            yield

    @contextmanager
    def under(self, *heads: str) -> Iterator[None]:
        """Each head owns the next statement, one level deeper, without braces.

        For loop nests that OpenMP ``collapse``s (perfectly nested, nothing between the heads)
        and one-statement loops.
        """
        depth = self._depth
        for head in heads:
            self.line(head)
            self._depth += 1
        try:
            yield
        finally:
            self._depth = depth

    @contextmanager
    def conditional(self, directive: str) -> Iterator[None]:
        """``#if ...``/``#ifdef ...`` (``directive``) ... ``#endif``, at column 0."""
        self._lines.append((_COLUMN0, directive))
        yield
        self._lines.append((_COLUMN0, "#endif"))

    def otherwise(self) -> None:
        """``#else`` inside ``conditional``."""
        self._lines.append((_COLUMN0, "#else"))

    def nest(self, other: CWriter) -> None:
        """Write ``other``'s lines here, indented by the current depth."""
        for depth, text in other._lines:
            keep = depth == _COLUMN0 or not text
            self._lines.append((depth if keep else depth + self._depth, text))

    def text(self) -> str:
        """The C text, one line per entry, without a final newline."""
        return "\n".join(INDENT * depth + text if text and depth > 0 else text
                         for depth, text in self._lines)

    def __str__(self) -> str:
        return self.text()
