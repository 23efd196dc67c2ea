"""The regression store: one minimized input per crash class under ``fuzz/regressions``.

``fuzz/regressions/<harness>/<hash>.json`` describes a case: the harness, the class key, the
first message, the seed of the run that found it, a replay command, and the payload (or the part
of it that is not in the data file). Text IR and ONNX inputs also get a data file next to it,
``<hash>.ir`` or ``<hash>.onnx``, that gradc's own tools read. ``<hash>`` is a hash of the
class key, so a class is stored once.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

from fuzz import codec
from fuzz.common import REPO
from fuzz.worker import harness_module

ROOT = os.path.join(REPO, "fuzz", "regressions")


@dataclass
class StoredCase:
    """One stored case: where it is and what it says."""

    path: str  # the file to replay: the data file when there is one, else the JSON file
    meta_path: str
    harness: str
    key: tuple[str, str, str]
    message: str
    payload: Any


def key_hash(key: tuple[str, ...] | list[str]) -> str:
    """A short stable hash of a class key."""
    return hashlib.sha1(json.dumps(list(key)).encode("utf-8", "surrogatepass")).hexdigest()[:12]


def stored_cases(root: str = ROOT) -> list[StoredCase]:
    """Every stored case, sorted by path (unreadable files are skipped)."""
    out = []
    for meta in sorted(glob.glob(os.path.join(root, "*", "*.json"))):
        try:
            out.append(load_case(meta))
        except (OSError, ValueError, KeyError):
            continue
    return out


def stored_keys(root: str = ROOT) -> dict[tuple[str, str, str], str]:
    """Class key -> the path of its stored case."""
    return {c.key: c.path for c in stored_cases(root)}


def save(harness: str, key: tuple[str, str, str], payload: Any, message: str, seed: int | None,
         root: str = ROOT, reproduced: bool = True, variant: str | None = None) -> str:
    """Write a case (data file and JSON); returns the path to replay it with.

    ``reproduced``: False when the input did not fail again when run alone (the failure
    depended on what the worker ran before); the JSON file says so. ``variant``: a suffix for
    another case of a key whose first stored case passes now (both are kept).
    """
    folder = os.path.join(root, harness)
    os.makedirs(folder, exist_ok=True)
    stem = os.path.join(folder, key_hash(key) + (f"-{variant}" if variant else ""))
    ext, data, rest = harness_module(harness).files(payload)
    path = stem + ext
    meta: dict[str, Any] = {
        "harness": harness, "key": list(key), "message": message[:2000], "seed": seed,
        "replay": f"python -m fuzz --replay {os.path.relpath(path, REPO)}",
        "payload": codec.encode(rest),
    }
    if not reproduced:
        meta["reproduced"] = False
    if data is not None:
        meta["data_file"] = os.path.basename(path)
        with open(path, "wb") as f:
            f.write(data)
    with open(stem + ".json", "w", encoding="utf-8") as f:
        f.write(json.dumps(meta, indent=1, ensure_ascii=True) + "\n")
    return path


def load_case(path: str) -> StoredCase:
    """A stored case from its JSON file or its data file (a bare data file gets defaults)."""
    stem, ext = os.path.splitext(path)
    meta_path = stem + ".json"
    meta: dict[str, Any] = {}
    if os.path.exists(meta_path):
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
    if ext == ".json" and not meta:
        raise ValueError(f"{path}: not a stored case")
    harness = meta.get("harness") or {".ir": "ir", ".onnx": "onnx"}.get(ext)
    if harness is None:
        raise ValueError(f"{path}: cannot tell the harness (no {meta_path})")
    data_file = meta.get("data_file") or (os.path.basename(path) if ext != ".json" else None)
    data = None
    if data_file:
        with open(os.path.join(os.path.dirname(path), data_file), "rb") as f:
            data = f.read()
    rest = codec.decode(meta.get("payload", {}))
    payload = harness_module(harness).load(data, rest)
    main = os.path.join(os.path.dirname(path), data_file) if data_file else meta_path
    key = tuple(meta.get("key") or (harness, "?", "?"))
    return StoredCase(main, meta_path, harness, key, meta.get("message", ""),  # type: ignore
                      payload)
