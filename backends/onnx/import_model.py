"""The model-level parts of an ONNX import: reading the model, the embedded gradc graph of a
gradc export, the default opset, the node order, and the grouped summary of refusals.

``importer`` drives an import; these helpers need no state of it.
"""

from __future__ import annotations

import heapq
import os
from typing import Any

import onnx

from gradc.errors import GradcError, ParseError, UnsupportedError, VerifyError
from gradc.ir.core import Graph
from gradc.ir.parser import parse_text
from gradc.backends.onnx.format import IR_HASH_KEY, IR_KEY, graph_digest, tensor_to_array
from gradc.backends.onnx.import_node import OnnxNode


def embedded_graph(model: Any) -> Graph | None:
    """The gradc graph embedded by ``to_onnx``, if the ONNX graph is still the one exported."""
    props = {p.key: p.value for p in model.metadata_props}
    if IR_KEY not in props or props.get(IR_HASH_KEY) != graph_digest(model.graph):
        return None
    try:
        values = {t.name: tensor_to_array(t, f"initializer {t.name!r}")
                  for t in model.graph.initializer}
        return parse_text(props[IR_KEY], values, extra_parameters=True)
    except GradcError as e:
        raise ParseError(f"ONNX model: its embedded gradc IR ({IR_KEY}) is invalid: {e}") from None


def load_model(src: Any) -> Any:
    """An ``onnx.ModelProto`` from a ModelProto, bytes or a path; GradcError when unreadable."""
    if isinstance(src, onnx.ModelProto):
        model = src
    elif isinstance(src, (bytes, bytearray, memoryview)):
        model = _parse(lambda: onnx.load_from_string(bytes(src)), "ONNX bytes")
    elif isinstance(src, (str, os.PathLike)):
        path = os.fspath(src)
        if not os.path.exists(path):
            raise ParseError(f"{path}: no such file")
        if os.path.isdir(path):
            raise ParseError(f"{path}: is a directory, not an ONNX file")
        model = _parse(lambda: onnx.load(path), path)
    else:
        raise VerifyError("from_onnx: model_or_path: expected an onnx.ModelProto, bytes or a "
                          f"path, got {type(src).__name__}")
    if not model.HasField("graph"):
        raise ParseError("ONNX model: not a model (it has no graph)")
    return model


def _parse(read: Any, what: str) -> Any:
    try:
        return read()
    except Exception as e:  # protobuf and onnx raise many kinds (DecodeError, OSError, ...)
        raise ParseError(f"{what}: not a readable ONNX model ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else 'no details'})") from None


class Pending(UnsupportedError):
    """An input that folds only in the second pass (the shape of a value built there) was read
    in the first: the reader waits for the second pass."""


def default_opset(model: Any) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    if any(n.domain in ("", "ai.onnx") for n in model.graph.node):
        raise VerifyError("ONNX model: opset_import: expected a version for the default "
                          "domain, got none")
    return 0


def topological(deps: list[set[int]], nodes: list[OnnxNode]) -> list[int]:
    """Kahn's algorithm, taking the lowest ready index first; VerifyError on a cycle."""
    users: list[list[int]] = [[] for _ in deps]
    waiting = [len(d) for d in deps]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) < len(deps):
        stuck = [nodes[i].where for i, w in enumerate(waiting) if w > 0]
        raise VerifyError(f"the ONNX graph has a cycle (nodes waiting on each other: "
                          f"{', '.join(stuck[:4])}{', ...' if len(stuck) > 4 else ''})")
    return order



def summary(nodes: list[OnnxNode], problems: list[tuple[int, str]]) -> str:
    """Problems grouped by ONNX op type in model order: ``Where (30 nodes, first 'a/Where')``."""
    groups: dict[str, list[str]] = {}
    seen: set[int] = set()
    for index, _ in sorted(problems, key=lambda p: p[0]):
        if 0 <= index < len(nodes):
            if index in seen:
                continue  # a node with several problems counts once
            seen.add(index)
            n = nodes[index]
            groups.setdefault(n.op, []).append(n.name or f"#{n.index}")
        else:
            groups.setdefault("(graph inputs, outputs, initializers)", []).append("")
    parts = []
    for op, names in groups.items():
        count = f"{len(names)} node{'s' if len(names) > 1 else ''}"
        parts.append(f"{op} ({count}, first {names[0]!r})" if names[0] else f"{op} ({len(names)})")
    return ", ".join(parts) + " (the full message lists every feature, one per line: --debug)"


__all__ = ["embedded_graph", "load_model", "Pending", "default_opset", "topological", "summary"]
