"""Read-back of gradc's ONNX without its embedded IR (a file gradc wrote and a user edited).

``to_onnx`` embeds the text IR with its digest, and ``from_onnx`` takes that back when the
digest matches (``fuzz.pipeline.check_export`` checks it gives the same graph). Once a user
edits the file the digest no longer matches, and the importer must read gradc's own lowering
from its ONNX ops (``IsNaN``, ``And``, ``GatherElements``, the tagged groups it raises back to
gradc ops, ...): a lowering target's output is importable by its importer. ``check_readback``
drops the metadata, imports the model, and runs both graphs on the reference target: the same
outputs (names, dtypes, shapes), the values within the ``onnx`` target's tolerance, on feeds of
small dyadic values (the lowering may sum in another order), the same ``InputError`` where the
original raises one.
"""

from __future__ import annotations

import random
import re
from typing import Any, Callable

import numpy as np

import gradc
from gradc.errors import GradcError, InputError
from gradc.ir.core import Graph

from fuzz.common import Finding
from fuzz.tolerance import floor_for, index_feeds


def _run(g: Graph, feeds: dict[str, np.ndarray]) -> tuple[Any, str | None]:
    try:
        return gradc.compile(g, target="reference", passes=None)(**feeds), None
    except InputError as e:
        return None, str(e)


def check_readback(g: Graph, model: Any, run: Callable[[str, Callable], Any],
                   rng: random.Random, compare: Callable[..., None]) -> None:
    """See the module docstring; ``run`` notes refusals as ``Stages.run`` does."""
    stripped = type(model)()
    stripped.CopyFrom(model)
    del stripped.metadata_props[:]
    try:
        back = gradc.from_onnx(stripped.SerializeToString())
    except GradcError as e:
        m = re.search(r"gradc (\w+) node|feature: (\w+)|^(\S+)", str(e))
        op = next((x for x in m.groups() if x), "?") if m else "?"
        raise Finding("readback", f"refused:{op}", f"from_onnx of to_onnx(g) without its "
                      f"embedded IR refuses it: {str(e)[:300]}") from None
    bind = {d: 2 for v in g.inputs for d in v.type.shape if isinstance(d, str)}
    nrng = np.random.default_rng(rng.getrandbits(32))
    feeds: dict[str, np.ndarray] = {}
    for v in g.inputs:
        shape = [bind.get(d, 2) if isinstance(d, str) else d for d in v.type.shape]
        dt = v.type.dtype.numpy
        feeds[v.name] = (nrng.integers(-8, 9, shape) / 4.0).astype(dt) if dt.kind == "f" \
            else nrng.integers(0, 3, shape).astype(dt)
    index_feeds(g, feeds, bind, rng)
    if sorted(v.name for v in back.inputs) != sorted(feeds):
        raise Finding("readback", "inputs", f"the read-back graph's inputs "
                      f"{sorted(v.name for v in back.inputs)} against {sorted(feeds)}")
    try:
        want, want_error = _run(g, feeds)
    except GradcError:
        return  # the original does not run on these feeds
    got, got_error = run("readback:run", lambda: _run(back, feeds)) or (None, None)
    if want_error is not None or got_error is not None:
        if got_error != want_error and (got is not None or got_error is not None):
            raise Finding("readback", "InputError", f"read back: {got_error!r}, the "
                          f"original's {want_error!r}")
        return
    if got is None or want is None:
        return
    floor = max(1.0, floor_for(g, feeds, bind))
    try:
        compare("onnx", got, want, sums=True, floor=floor)
    except Finding as e:
        raise Finding("readback", e.frame, f"read back without the embedded IR: {e}") from None


__all__ = ["check_readback"]
