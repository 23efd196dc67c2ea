"""The repository documents itself: the operator reference is current, and no link leaves it.

- docs/operators.md is what ``python -m gradc.opdoc --write`` renders from the registry, byte
  for byte; every op declares the facts the page prints (numerics, a summary, a gradient).
- No document of the repository (README.md, docs/*.md, every other Markdown file, .ci/run)
  names a file outside it (the project's shared API.md, SPEC*.md, DESIGN.md, ../shared), and
  every relative Markdown link points to a file of the repository (and an anchor to a heading
  of it).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gradc import opdoc
from gradc.errors import GradcError
from gradc.ir.ops import REGISTRY
from gradc.ir.ops.registry import NUMERICS

ROOT = Path(__file__).resolve().parents[1]


def _documents() -> list[Path]:
    """README.md, .ci/run and every Markdown file of the repository (not of .venv, builds)."""
    found = [p for p in ROOT.rglob("*.md") if not any(
        part.startswith(".") or part in ("build", "dist") or part.endswith(".egg-info")
        for part in p.relative_to(ROOT).parts[:-1])]
    return sorted({ROOT / "README.md", ROOT / ".ci" / "run", *found})


DOCUMENTS = _documents()
OUTSIDE = re.compile(r"API\.md|\bSPEC\b|SPEC-\w|DESIGN\.md|\.\./shared|shared/research|§")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def test_operator_reference_is_current():
    page = ROOT / "docs" / "operators.md"
    text = opdoc.render()
    current = page.read_text(encoding="utf-8") if page.is_file() else ""
    assert current == text, (
        "docs/operators.md is out of date with the operator definitions: run "
        f"`{opdoc.COMMAND}` and commit the result")


def test_every_registered_op_has_an_entry():
    text = opdoc.render()
    for name in REGISTRY:
        assert f"\n### {name}\n" in text, name


@pytest.mark.parametrize("op", sorted(REGISTRY))
def test_every_op_declares_what_the_reference_prints(op):
    d = REGISTRY[op]
    assert d.numerics in NUMERICS, (
        f"{op}: declare its numerics class on the OpDef, numerics = one of {sorted(NUMERICS)} "
        "(exact: selections and single roundings; summing: ordered sums; transcendental)")
    assert d.transcendental == (d.numerics == "transcendental"), op
    assert opdoc.summary(d), f"{op}: the class docstring says nothing after the signature"
    assert opdoc.gradient(d), f"{op}: the vjp has no docstring saying what it builds"
    for a in d.attributes:
        if a.kind == "choice":
            assert a.choices and a.default in a.choices, (op, a)


def test_a_docstring_pointing_outside_is_refused():
    class Fake(type(REGISTRY["relu"])):  # type: ignore[misc]
        """``fake(input)``: as SPEC-training.md §9.9's rule says."""

    with pytest.raises(GradcError, match="reword"):
        opdoc.summary(Fake())


def test_a_citation_in_parentheses_is_dropped():
    class Fake(type(REGISTRY["relu"])):  # type: ignore[misc]
        """``fake(input)``: the ``input`` doubled (§9.9)."""

    assert opdoc.summary(Fake()) == "the `input` doubled."


def test_check_mode_reports_a_stale_page(tmp_path, capsys):
    stale = tmp_path / "operators.md"
    stale.write_text("old\n", encoding="utf-8")
    assert opdoc.main(["--check", "--path", str(stale)]) == 1
    assert opdoc.COMMAND in capsys.readouterr().out
    assert opdoc.main(["--write", "--path", str(stale)]) == 0
    assert opdoc.main(["--check", "--path", str(stale)]) == 0


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_document_points_outside_the_repository(doc):
    bad = [(i, line.strip()) for i, line in
           enumerate(doc.read_text(encoding="utf-8").splitlines(), 1) if OUTSIDE.search(line)]
    assert not bad, f"{doc.relative_to(ROOT)} points outside the repository: {bad[:5]}"


def _anchors(text: str) -> set[str]:
    """GitHub's anchors of a Markdown file's headings (lowercase, punctuation dropped)."""
    out = set()
    for line in text.splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(slug)
    return out


def _code_free(text: str) -> str:
    """The text without fenced code blocks and inline code, where brackets are not links."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return re.sub(r"`[^`\n]*`", "", text)


@pytest.mark.parametrize("doc", [d for d in DOCUMENTS if d.suffix == ".md"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc):
    text = doc.read_text(encoding="utf-8")
    broken = []
    for target in LINK.findall(_code_free(text)):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists() or ROOT not in (dest, *dest.parents):
            broken.append(target)
        elif anchor and dest.suffix == ".md" and \
                anchor not in _anchors(dest.read_text(encoding="utf-8")):
            broken.append(target)
    assert not broken, f"{doc.relative_to(ROOT)}: links to nothing in the repository: {broken}"


def test_the_link_check_sees_a_broken_link(tmp_path):
    assert LINK.findall("see [the API](API.md) and ![img](x.png) and [a](b.md#c)") == \
        ["API.md", "b.md#c"]
    assert OUTSIDE.search("the whole interface is in `API.md`")
    assert OUTSIDE.search("as SPEC.md says") and OUTSIDE.search("SPEC-training §9")
    assert not OUTSIDE.search("INCIDENTAL, SPECIAL, EXEMPLARY")  # a licence's words
    assert ROOT / "docs" / "training.md" in DOCUMENTS and ROOT / ".ci" / "run" in DOCUMENTS


def test_every_imported_onnx_op_has_a_row_in_import_md():
    from gradc.backends.onnx import importer  # noqa: F401  (registers every converter)
    from gradc.backends.onnx.import_node import CONVERTERS

    rows = [line for line in (ROOT / "docs" / "import.md").read_text(encoding="utf-8")
            .splitlines() if line.startswith("| `")]
    named = {op for line in rows for op in re.findall(r"`([A-Za-z]+)`", line.split("|")[1])}
    missing = sorted(set(CONVERTERS) - named)
    assert not missing, (f"docs/import.md has no table row for the ONNX ops {missing}: add one "
                         "(what each becomes, and its limits) to the table of its family")
