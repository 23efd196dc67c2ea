"""CWriter: blocks own their braces, depth is tracked for the emitters, misuse fails early."""

from __future__ import annotations

import pytest

from gradc.backends.c.writer import CWriter


def test_blocks_nest_and_close_their_braces():
    w = CWriter()
    w.line("#pragma omp parallel for")
    with w.under("for (int64_t i = 0; i < n; i++)"), w.block("for (int64_t j = 0; j < m; j++)"):
        w.declare("const float", "t0", "x[i * m + j]")
        with w.block("if (t0 > 0)"):
            w.line("y[i * m + j] = t0;")
        with w.orelse():
            w.line("y[i * m + j] = 0;")
    assert str(w) == "\n".join([
        "#pragma omp parallel for",
        "for (int64_t i = 0; i < n; i++)",
        "  for (int64_t j = 0; j < m; j++) {",
        "    const float t0 = x[i * m + j];",
        "    if (t0 > 0) {",
        "      y[i * m + j] = t0;",
        "    } else {",
        "      y[i * m + j] = 0;",
        "    }",
        "  }"])


def test_nest_blocks_conditionals_labels_and_comments():
    inner = CWriter()
    inner.line("a();")
    with inner.conditional("#if GC_SSE2"):
        inner.line("b();")
        inner.otherwise()
        inner.line("c();")
    w = CWriter()
    w.comment("one", "two")
    with w.block("int f(void)"):
        with w.blocks(["for (;;)", "while (1)"]):
            w.nest(inner)
        with w.blocks([]):
            w.line("d();")
        w.blank()
        w.label("done")
        w.line("return 0;")
    assert w.text() == "\n".join([
        "/* one", " * two", " */",
        "int f(void) {",
        "  for (;;) {",
        "    while (1) {",
        "      a();",
        "#if GC_SSE2",
        "      b();",
        "#else",
        "      c();",
        "#endif",
        "    }",
        "  }",
        "  d();",
        "",
        "done:",
        "  return 0;",
        "}"])


def test_misuse_is_an_error_in_python_not_in_c():
    w = CWriter()
    with w.block():
        w.declare("int", "x", "0")
        with pytest.raises(ValueError, match="already declared"):
            w.declare("int", "x", "1")
        with w.block():
            w.declare("int", "x", "1")  # shadowing in an inner block is C
    w.line("f();")
    with pytest.raises(ValueError, match="follow a block"):
        with w.orelse():
            pass
    with pytest.raises(ValueError, match="'\\*/'"):
        w.comment("a */ b")
