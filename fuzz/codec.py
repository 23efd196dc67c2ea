"""JSON encoding of payloads: bytes, arrays, dtypes, tuples, non-finite floats, huge ints.

``encode`` turns a payload into JSON-safe data (tagged dicts for what JSON lacks) and
``decode`` turns it back; ``dumps`` / ``loads`` wrap them with ``json``. Python's ``json`` keeps
integers of any size, writes NaN and Infinity, and escapes lone surrogates, so those pass as is.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np


def encode(obj: Any) -> Any:
    """JSON-safe data for a payload."""
    if isinstance(obj, int) and not isinstance(obj, bool) and obj.bit_length() > 12000:
        return {"__bigint__": hex(obj)}  # past the 4300-digit limit of str(int)
    if isinstance(obj, (bytes, bytearray)):
        try:  # readable text stays readable in the JSON file
            return {"__utf8__": bytes(obj).decode("utf-8")}
        except UnicodeDecodeError:
            return {"__bytes__": base64.b64encode(bytes(obj)).decode("ascii")}
    if isinstance(obj, np.ndarray):
        a = np.array(obj, order="C")  # (ascontiguousarray makes 0-d arrays 1-d)
        return {"__array__": a.dtype.str, "shape": list(a.shape),
                "data": base64.b64encode(a.tobytes()).decode("ascii")}
    if isinstance(obj, np.generic):
        return encode(np.asarray(obj).reshape(()))
    if type(obj).__name__ == "DType" and hasattr(obj, "value"):
        return {"__dtype__": obj.value}
    if isinstance(obj, tuple):
        return {"__tuple__": [encode(x) for x in obj]}
    if isinstance(obj, list):
        return [encode(x) for x in obj]
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj):
            return {k: encode(v) for k, v in obj.items()}
        return {"__items__": [[encode(k), encode(v)] for k, v in obj.items()]}
    return obj


def decode(obj: Any) -> Any:
    """The payload that ``encode`` was given."""
    if isinstance(obj, list):
        return [decode(x) for x in obj]
    if not isinstance(obj, dict):
        return obj
    if "__bigint__" in obj:
        return int(obj["__bigint__"], 16)
    if "__utf8__" in obj:
        return obj["__utf8__"].encode("utf-8")
    if "__bytes__" in obj:
        return base64.b64decode(obj["__bytes__"])
    if "__array__" in obj:
        raw = base64.b64decode(obj["data"])
        return np.frombuffer(raw, np.dtype(obj["__array__"])).reshape(obj["shape"]).copy()
    if "__dtype__" in obj:
        from gradc.ir.types import DType

        return DType(obj["__dtype__"])
    if "__tuple__" in obj:
        return tuple(decode(x) for x in obj["__tuple__"])
    if "__items__" in obj:
        return {decode(k): decode(v) for k, v in obj["__items__"]}
    return {k: decode(v) for k, v in obj.items()}


def dumps(obj: Any) -> str:
    """JSON text of a payload (indented, keys in order)."""
    return json.dumps(encode(obj), indent=1, ensure_ascii=True)


def loads(text: str) -> Any:
    """The payload of ``dumps``'s text."""
    return decode(json.loads(text))
