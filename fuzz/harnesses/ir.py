"""Harness ``ir``: random graphs from the builders, printed, mutated as text, then every stage.

An input is either ``{"kind": "text", "text": ...}`` (a text IR, mutated or not) or
``{"kind": "program", "program": ...}`` (the builder calls of ``fuzz.graphgen``: used when a
builder or the printer itself crashes, so there is no text to keep, and now and then to test
graphs that never went through the parser). Options: ``seed`` (random inputs, symbol values),
``c`` (also compile and run the C target, ~0.3 s), ``grad``, ``onnx_export``.
"""

from __future__ import annotations

import random
import re
from typing import Any, Callable

from gradc.errors import GradcError
from gradc.ir.parser import parse

from fuzz.graphgen import BuildCrash, generate_graph, replay
from fuzz.minimize import ddmin
from fuzz.pipeline import check_graph
from fuzz.textmut import TextMutator, join, relu_chain, tokens


def _options(rng: random.Random) -> dict[str, Any]:
    return {"seed": rng.getrandbits(32), "c": rng.random() < 0.2, "grad": True,
            "onnx_export": True, "api": True}


def generate(rng: random.Random) -> dict[str, Any]:
    """A new input: a generated graph's text with 0..5 mutations, or its program."""
    opts = _options(rng)
    if rng.random() < 0.01:
        text = relu_chain(rng.choice((300, 1200, 2500)), rng.choice(("f32", "f64")))
        return {"kind": "text", "text": text, **opts}
    try:
        rec = generate_graph(rng)
    except BuildCrash as e:
        return {"kind": "program", "program": e.program, **opts}
    try:
        text = str(rec.graph)
    except Exception:  # the printer crashed: the program reproduces it
        return {"kind": "program", "program": rec.program, **opts}
    if rng.random() < 0.1:
        return {"kind": "program", "program": rec.program, **opts}
    donors: list[str] = []
    try:
        donors.append(str(generate_graph(rng).graph))
    except Exception:  # a donor is optional
        pass
    count = rng.choice((0, 0, 0, 0, 1, 1, 2, 3, 5))
    text = TextMutator(rng, donors).mutate(text, count)
    if count and rng.random() < 0.7:
        text = repair_types(text)
    return {"kind": "text", "text": text, **opts}


_RESULT_TYPE = re.compile(r"result type: expected (?P<want>.+), got (?P<got>.+)$")


def repair_types(text: str, rounds: int = 8) -> str:
    """Rewrite result types the parser says are wrong, so a mutated attribute gets deeper.

    ``parse`` reports ``result type: expected T, got U`` for a statement whose declared type
    does not match what its (mutated) attributes infer; the declared type is replaced by T.
    """
    for _ in range(rounds):
        try:
            parse(text)
            return text
        except GradcError as e:
            m = _RESULT_TYPE.search(str(e))
            line = getattr(e, "line", 0)
            if m is None or not line:
                return text
            lines = text.split("\n")
            if line > len(lines):
                return text
            cut = lines[line - 1].rfind(" : ")
            if cut < 0:
                return text
            body = lines[line - 1][cut + 3:]
            rest = body[body.find(" graph"):] if " graph" in body else ""
            lines[line - 1] = lines[line - 1][:cut + 3] + m.group("want") + rest
            text = "\n".join(lines)
        except Exception:  # a crash of the parser: keep the text, execute reproduces it
            return text
    return text


def execute(payload: dict[str, Any]) -> str:
    """Parse (or replay) the input, then run every stage (``fuzz.pipeline``)."""
    try:
        if payload["kind"] == "program":
            g = replay(payload["program"])
        else:
            g = parse(payload["text"])
    except GradcError:
        return "refused:parse" if payload["kind"] == "text" else "refused:build"
    return check_graph(g, payload)


def reduce(payload: dict[str, Any], test: Callable[[Any], bool]) -> dict[str, Any]:
    """Fewer lines, then fewer tokens (text); fewer steps (program); fewer stages."""
    cur = dict(payload)
    for opt in ("c", "grad", "onnx_export", "api"):
        if cur.get(opt, opt != "api") and test({**cur, opt: False}):
            cur[opt] = False
    if cur["kind"] == "program":
        prog = cur["program"]
        steps = ddmin(prog["steps"], lambda s: test({**cur, "program": {**prog, "steps": s}}))
        return {**cur, "program": {**prog, "steps": steps}}
    return reduce_text(cur, test)


def reduce_text(cur: dict[str, Any], test: Callable[[Any], bool]) -> dict[str, Any]:
    """Reduce ``cur["text"]``: lines, then parameters and outputs, lines again, tokens."""
    cur = dict(cur)
    lines = ddmin(cur["text"].split("\n"), lambda ls: test({**cur, "text": "\n".join(ls)}))
    cur["text"] = "\n".join(lines)
    dropped = _drop_list_items(cur, test)
    if dropped != cur["text"]:  # fewer inputs and outputs: lines may go now
        lines = ddmin(dropped.split("\n"), lambda ls: test({**cur, "text": "\n".join(ls)}))
        cur["text"] = "\n".join(lines)
    toks = tokens(cur["text"])
    kept = ddmin(toks, lambda ts: test({**cur, "text": join(ts)}))
    cur["text"] = join(kept)
    return cur


_PARAM = re.compile(r'%(?:"(?:[^"\\]|\\.)*"|[A-Za-z0-9_.]+): [a-z0-9]+\[[^\]]*\]')
_RETURNED = re.compile(r'%(?:"(?:[^"\\]|\\.)*"|[A-Za-z0-9_.]+)')


def _drop_list_items(cur: dict[str, Any], test: Callable[[Any], bool]) -> str:
    """Drop graph parameters and returned values one at a time (what line ddmin cannot)."""
    text = cur["text"]
    for pattern, where in ((_PARAM, "graph"), (_RETURNED, "return")):
        i = 0
        while True:
            lines = text.split("\n")
            idx = [k for k, ln in enumerate(lines) if ln.lstrip().startswith(where)]
            if not idx:
                break
            k = idx[0]
            items = list(pattern.finditer(lines[k]))
            if i >= len(items):
                break
            m = items[i]
            start, end = m.start(), m.end()
            line = lines[k]
            if line[end:end + 2] == ", ":
                end += 2
            elif line[max(0, start - 2):start] == ", ":
                start -= 2
            lines[k] = line[:start] + line[end:]
            cand = "\n".join(lines)
            if test({**cur, "text": cand}):
                text = cand
            else:
                i += 1
    return text


def files(payload: dict[str, Any]) -> tuple[str, bytes | None, dict[str, Any]]:
    """(extension, data file contents or None, the rest of the payload for the JSON file)."""
    if payload["kind"] == "text":
        rest = {k: v for k, v in payload.items() if k != "text"}
        return ".ir", payload["text"].encode("utf-8", "surrogatepass"), rest
    return ".json", None, payload


def load(data: bytes | None, meta: dict[str, Any]) -> dict[str, Any]:
    """The payload of a stored case (``files``'s inverse); a bare ``.ir`` file gets defaults."""
    if data is None:
        return meta
    opts = {"seed": 0, "c": True, "grad": True, "onnx_export": True}
    return {**opts, **meta, "kind": "text", "text": data.decode("utf-8", "surrogatepass")}
