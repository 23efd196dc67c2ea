"""Arrays on the device: gradc's own (``DeviceArray``, an output kept on the GPU) and other
libraries' (``__cuda_array_interface__`` or DLPack: CuPy arrays, CUDA torch tensors).

``describe`` reads where a foreign array lies, its dtype, shape and whether it is C-contiguous,
without copying it and without importing the library that made it (DLPack through ctypes), so
an ``Executable`` of target ``"cuda"`` takes GPU arrays as inputs without a host round trip.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13


@dataclass(frozen=True)
class Flags:
    """The one NumPy flag the Executable asks of an array."""

    c_contiguous: bool


@dataclass(frozen=True)
class Foreign:
    """An array the runner reads where it lies: its address, dtype and shape."""

    ptr: int
    shape: tuple[int, ...]
    dtype: np.dtype
    flags: Flags
    keep: Any = None  # what keeps the memory alive while it is read (the array, a capsule)
    ours: bool = False  # a DeviceArray of gradc (no other stream writes it)

    @property
    def ndim(self) -> int:
        """The rank."""
        return len(self.shape)


class DeviceArray:
    """An array in a cuda executable's device arena: an output that stayed on the GPU.

    It is a view of the arena: the executable's next call writes the same place (an output
    updated in place is its input's buffer, which a ``Trainer`` passes back on every step
    without a copy). ``numpy()`` (or ``np.asarray``) copies it to the host;
    ``__cuda_array_interface__`` lets CuPy or torch read it where it lies.
    """

    # Read-only: an Executable that checked an array once takes the same object again
    # without checking its place, dtype and shape (``executable._exact``, ``runtime._inputs``).
    __slots__ = ("_ptr", "_shape", "_dtype", "_size", "_nbytes", "_owner", "_on_device",
                 "__weakref__")

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: np.dtype, owner: Any,
                 on_device: bool = True) -> None:
        self._ptr, self._shape, self._dtype = int(ptr), tuple(shape), np.dtype(dtype)
        self._size = int(np.prod(self._shape, dtype=np.int64))
        self._nbytes = self._size * self._dtype.itemsize
        self._owner = owner  # the runner: its driver copies, and it keeps the arena alive
        self._on_device = on_device

    @property
    def ptr(self) -> int:
        """The device address of the first element."""
        return self._ptr

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape."""
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        """The element type."""
        return self._dtype

    @property
    def size(self) -> int:
        """The number of elements."""
        return self._size

    @property
    def nbytes(self) -> int:
        """The bytes of the elements."""
        return self._nbytes

    @property
    def ndim(self) -> int:
        """The rank."""
        return len(self.shape)

    def numpy(self) -> np.ndarray:
        """A host copy."""
        out = np.empty(self.shape, self.dtype)
        self._owner.download(out, self.ptr)
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        if not self._on_device:
            raise AttributeError("a DeviceArray of the host harness (runtime='host') is not "
                                 "in GPU memory")
        self._owner.synchronize()  # the step may still run on gradc's stream: finish it first
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "version": 3, "strides": None, "stream": None}

    def __repr__(self) -> str:
        where = "cuda" if self._on_device else "host harness"
        return f"<DeviceArray {self.dtype}{list(self.shape)} on {where}>"


def _row_major(shape: tuple[int, ...], strides: tuple[int, ...] | None, unit: int) -> bool:
    """True when ``strides`` (counted in ``unit``: 1 for elements, the item size for bytes;
    None: compact) are those of a C-contiguous array (axes of size 1 have any stride)."""
    if strides is None:
        return True
    want = unit
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != want:
            return False
        want *= n
    return True


def describe(obj: Any, host: bool = False) -> Foreign | None:
    """Where ``obj`` (not a NumPy array) lies, or None when it is no GPU array. ``host``: the
    runner's "device" is host memory (the harness), so arrays in host memory are accepted."""
    if isinstance(obj, DeviceArray):
        return Foreign(obj.ptr, obj.shape, obj.dtype, Flags(True), obj, ours=True)
    try:
        cai = obj.__cuda_array_interface__
    except Exception:  # noqa: BLE001 -- an object may raise anything here (a CPU tensor does)
        cai = None
    if isinstance(cai, dict) and not host:
        return _from_interface(obj, cai)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        try:
            device = obj.__dlpack_device__()[0]
            if device in (KDL_CUDA, KDL_CUDA_MANAGED) or (host and device == KDL_CPU):
                return from_dlpack(obj)
        except Exception:  # noqa: BLE001 -- a foreign object may raise anything: not taken
            return None
    return None


def _from_interface(obj: Any, cai: dict[str, Any]) -> Foreign | None:
    """A ``__cuda_array_interface__`` (version 2 or 3) read into a description."""
    if cai.get("mask") is not None:
        return None
    dtype = np.dtype(cai["typestr"])
    shape = tuple(int(n) for n in cai["shape"])
    strides = cai.get("strides")  # in bytes
    flags = Flags(_row_major(shape, tuple(strides) if strides else None, dtype.itemsize))
    return Foreign(int(cai["data"][0] or 0), shape, dtype, flags, obj)


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    """DLPack's ``DLTensor`` (the first member of ``DLManagedTensor``)."""

    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32),
                ("dtype", _DataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_KINDS = {0: "i", 1: "u", 2: "f", 6: "b"}  # DLPack type codes: int, uint, float, bool


def from_dlpack(obj: Any) -> Foreign | None:
    """An object's DLPack capsule read in place (the capsule is kept: the producer frees the
    tensor when it is collected, as for a consumer that only looks)."""
    capsule = obj.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    t = _Tensor.from_address(get(capsule, b"dltensor"))
    kind = _KINDS.get(t.dtype.code)
    if kind is None or t.dtype.lanes != 1:
        return None
    dtype = np.dtype("bool") if kind == "b" else np.dtype(f"{kind}{t.dtype.bits // 8}")
    shape = tuple(int(t.shape[a]) for a in range(t.ndim))
    strides = tuple(int(t.strides[a]) for a in range(t.ndim)) if t.strides else None
    return Foreign(int(t.data or 0) + int(t.byte_offset), shape, dtype,
                   Flags(_row_major(shape, strides, 1)), (obj, capsule))
