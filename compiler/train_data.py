"""Training data for ``gradc train``: load an ``.npz`` file, check it fits the model, batch it.

``data.npz`` holds one array per forward input and one for
``labels``/``target``, examples on the first axis; data that does not fit the model is refused
before training starts. ``load_dataset`` does every check up front and raises ``InputError``
naming the file and the array, so that a bad file never costs a compile or a step::

    ds = load_dataset("examples/digits.npz", [("x", "float32", ("N", 1, 8, 8))],
                      label=("labels", "int64", ("N",)), classes=10)
    for epoch in range(3):
        for batch in ds.batches(32, shuffle=True, seed=0).epoch_batches(epoch):
            trainer.step(**batch)

The file is read with ``allow_pickle=False`` (no code from a file runs), and each member's
header is checked against its stored size before its data is allocated. The order of batches
depends only on the seed and the epoch (``Batches.order``), so a run resumed at epoch ``e`` sees
the same batches as one that never stopped, and a PyTorch cross-check can feed the same ones.

``check_batch`` is the check of the values that the file and ``gradc.Trainer.step`` share:
floating-point arrays hold no NaN or infinity, labels lie in the class range (or equal
``ignore_index``), and labels of the wrong shape say how their shape follows from the model's
class axis. ``gradc train`` runs it on the whole file before training, ``Trainer.step`` on each
batch before the step, so that the command line and the Python API refuse the same data.
"""

from __future__ import annotations

import math
import os
import zipfile
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

import numpy as np

from gradc.errors import GradcError, InputError
from gradc.files import check_input_file
from gradc.ir.core import Graph
from gradc.ir.types import DType

Dim = int | str
ArraySpec = tuple[str, object, Sequence[Dim]]  # (name, dtype as DType/name/NumPy, shape)
RNG_INPUT = "rng_state"  # the dropout state: a parameter of the step, never data


@dataclass(frozen=True)
class DataSpec:
    """The arrays a training step takes, examples (the batch) on axis 0: the forward inputs,
    then labels or target; the class count labels lie below, the label that is let through
    (``ignore_index``), and how the labels' shape follows from the model (for messages)."""

    inputs: tuple[ArraySpec, ...]
    label: ArraySpec | None = None
    classes: int | None = None
    ignore_index: int | None = None
    label_note: str = ""

    @property
    def arrays(self) -> tuple[ArraySpec, ...]:
        """Every array's spec, the label's last."""
        return (*self.inputs, *([self.label] if self.label is not None else []))


def data_spec(forward: Graph, step: Graph, class_axis: int = 1,
              ignore_index: int | None = None) -> DataSpec:
    """The data of ``step`` (``gradc.training_step`` of ``forward``): its inputs other than
    ``step`` and the dropout state; labels below the class count on the first output's
    ``class_axis``."""
    fwd = {v.name for v in forward.inputs if v.name != RNG_INPUT}
    inputs = tuple((v.name, v.type.dtype.name, v.type.shape) for v in step.inputs
                   if v.name in fwd)
    extra = [v for v in step.inputs if v.name not in fwd and v.name not in ("step", RNG_INPUT)]
    if not extra:
        return DataSpec(inputs)
    v = extra[0]
    label = (v.name, v.type.dtype.name, v.type.shape)
    if v.name != "labels":
        return DataSpec(inputs, label)
    first = forward.outputs[0]
    axis = class_axis % first.type.rank
    classes = first.type.shape[axis]
    note = (f"the first output {first.name!r} {_fmt_shape(first.type.shape)} without its class "
            f"axis {axis}; the class axis is class_axis (--class-axis), e.g. -1 for a "
            f"language model's [N, T, V] logits")
    return DataSpec(inputs, label, classes if isinstance(classes, int) else None, ignore_index,
                    note)


@dataclass(frozen=True)
class Dataset:
    """Checked training arrays (model inputs, then labels/target), examples on axis 0."""

    path: str
    arrays: dict[str, np.ndarray]
    notes: tuple[str, ...] = ()  # exact conversions made while loading, for the user to see

    @property
    def size(self) -> int:
        """The number of examples."""
        return int(next(iter(self.arrays.values())).shape[0])

    def __len__(self) -> int:
        return self.size

    def batches(self, batch_size: int, shuffle: bool = True, seed: int = 0,
                drop_last: bool = False) -> Batches:
        """The batching of this data: iterate it for epoch 0, or ``epoch_batches(e)``."""
        _check_int("batch_size", batch_size, 1)
        _check_int("seed", seed, 0)
        if drop_last and batch_size > self.size:
            raise GradcError(f"{self.path}: batch size {batch_size} is larger than its "
                             f"{self.size} examples, and drop_last leaves no batch")
        return Batches(self, batch_size, bool(shuffle), seed, bool(drop_last))


@dataclass(frozen=True)
class Batches:
    """A dataset cut into batches, in an order that depends only on the seed and the epoch."""

    dataset: Dataset
    batch_size: int
    shuffle: bool
    seed: int
    drop_last: bool

    def __len__(self) -> int:
        """Batches per epoch."""
        n, b = self.dataset.size, self.batch_size
        return n // b if self.drop_last else -(-n // b)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return self.epoch_batches(0)

    def order(self, epoch: int) -> np.ndarray:
        """The example indices of ``epoch`` in the order they are served (int64)."""
        _check_int("epoch", epoch, 0)
        n = self.dataset.size
        if not self.shuffle:
            return np.arange(n, dtype=np.int64)
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, epoch])))
        return rng.permutation(n).astype(np.int64)

    def epoch_batches(self, epoch: int) -> Iterator[dict[str, np.ndarray]]:
        """The batches of ``epoch`` (0 first): dicts name -> C-contiguous array (copies)."""
        order = self.order(epoch)
        for i in range(len(self)):
            idx = order[i * self.batch_size:(i + 1) * self.batch_size]
            yield {name: np.ascontiguousarray(a[idx]) for name, a in self.dataset.arrays.items()}


def load_dataset(path: str | os.PathLike[str], inputs: Sequence[ArraySpec],
                 label: ArraySpec | None = None, classes: int | None = None,
                 ignore_index: int | None = None) -> Dataset:
    """Load ``path`` (.npz) and check it against the model's data inputs and labels/target.

    ``inputs``: (name, dtype, shape) of each forward input, shape[0] the batch dim; ``label``:
    the same for ``labels``/``target`` when a loss is added; ``classes``: the class count that
    labels must lie below (``ignore_index`` also allowed). Raises InputError on any mismatch.
    """
    return load_data(path, DataSpec(tuple(inputs), label, classes, ignore_index))


def load_data(path: str | os.PathLike[str], spec: DataSpec) -> Dataset:
    """``load_dataset`` with the arrays described by a ``DataSpec``."""
    where = os.fspath(path)
    specs = list(spec.arrays)
    raw = _read_npz(where, specs)
    arrays: dict[str, np.ndarray] = {}
    notes: list[str] = []
    for a in specs:
        arrays[a[0]] = _check_array(where, a, raw[a[0]], a is spec.label, notes,
                                    spec.label_note if a is spec.label else "")
    _check_examples(where, specs, arrays)
    _check_symbols(where, specs, arrays)
    check_batch(where, arrays, spec)
    return Dataset(where, arrays, tuple(notes))


def check_batch(where: str, arrays: Mapping[str, object], spec: DataSpec) -> None:
    """The checks of values that data file and ``Trainer.step`` share (module docstring):
    InputError naming ``where``, the array, the first bad value and its index. Arrays of
    another type, dtype or rank are left to the caller's own checks."""
    if spec.label is not None and spec.label_note:
        a = arrays.get(spec.label[0])
        shape = tuple(spec.label[2])
        if isinstance(a, np.ndarray) and (a.ndim != len(shape) or any(
                isinstance(d, int) and d != n for d, n in zip(shape[1:], a.shape[1:]))):
            raise InputError(f"{where}: array {spec.label[0]!r}: expected shape "
                             f"{_fmt_shape(shape)} ({spec.label_note}), got "
                             f"{_fmt_shape(a.shape)}")
    for name, _, _ in spec.arrays:
        a = arrays.get(name)
        if isinstance(a, np.ndarray) and a.dtype.kind == "f":
            _check_finite(where, name, a)
    if spec.label is not None and spec.classes is not None:
        a = arrays.get(spec.label[0])
        if isinstance(a, np.ndarray) and a.dtype.kind in "iu":
            _check_labels(where, spec.label[0], a, spec.classes, spec.ignore_index)


def _read_npz(path: str, specs: Sequence[ArraySpec]) -> dict[str, np.ndarray]:
    names = [s[0] for s in specs]
    if len(set(names)) != len(names):
        raise InputError(f"{path}: the model names two arrays alike: {', '.join(names)}")
    check_input_file(path)
    if os.path.getsize(path) == 0:
        raise InputError(f"{path}: empty file (expected an .npz archive with arrays "
                         f"{_names(names)})")
    if not zipfile.is_zipfile(path):
        raise InputError(f"{path}: not an .npz archive (np.savez writes one; expected arrays "
                         f"{_names(names)})")
    try:
        with np.load(path, allow_pickle=False) as npz:
            files = list(npz.files)
            _check_names(path, files, names)
            _check_headers(path, npz.zip, names)
            return {name: _read_member(path, npz, name) for name in names}
    except InputError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, NotImplementedError) as e:
        raise InputError(f"{path}: not a readable .npz archive ({e})") from None


def _check_names(path: str, files: list[str], names: list[str]) -> None:
    if not files:
        raise InputError(f"{path}: the archive holds no arrays (expected {_names(names)})")
    missing = [n for n in names if n not in files]
    if missing:
        raise InputError(f"{path}: missing array {_names(missing)} (the model takes "
                         f"{_names(names)}; the file has {_names(files)})")
    extra = [f for f in files if f not in names]
    if extra:
        raise InputError(f"{path}: unexpected array {_names(extra)} (the model takes "
                         f"{_names(names)})")


def _check_headers(path: str, archive: zipfile.ZipFile, names: list[str]) -> None:
    """Refuse a member whose header claims more data than it stores, before allocating it."""
    for name in names:
        info = archive.getinfo(name + ".npy") if name + ".npy" in archive.namelist() else None
        if info is None:
            raise InputError(f"{path}: array {name!r}: not an .npy member of the archive")
        with archive.open(info) as f:
            try:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, _, dtype = np.lib.format.read_array_header_1_0(f)
                else:
                    shape, _, dtype = np.lib.format.read_array_header_2_0(f)
            except ValueError as e:
                raise InputError(f"{path}: array {name!r}: not a readable .npy member "
                                 f"({e})") from None
            if dtype.hasobject:
                raise InputError(f"{path}: array {name!r}: holds Python objects (dtype "
                                 f"{dtype}), which are not loaded (no pickles)")
            need = int(np.prod(shape, dtype=object)) * dtype.itemsize
            have = info.file_size - f.tell()
            if need > have:
                raise InputError(f"{path}: array {name!r}: truncated: its header says "
                                 f"{dtype}{list(shape)} ({need} bytes), the file holds {have}")


def _read_member(path: str, npz: np.lib.npyio.NpzFile, name: str) -> np.ndarray:
    try:
        a = npz[name]
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise InputError(f"{path}: array {name!r}: not readable ({e})") from None
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))  # big-endian data: same values, native order
    return np.ascontiguousarray(a)


def _check_array(path: str, spec: ArraySpec, a: np.ndarray, is_label: bool,
                 notes: list[str], note: str = "") -> np.ndarray:
    name, dtype, shape = spec[0], DType.of(spec[1]), tuple(spec[2])
    if not shape:
        raise InputError(f"{path}: array {name!r}: the model's {name!r} is a scalar, with no "
                         f"axis of examples to train on")
    if a.ndim != len(shape) or any(isinstance(d, int) and d != n
                                   for d, n in zip(shape[1:], a.shape[1:])):
        want = _fmt_shape(("examples", *shape[1:]))
        why = f": {note}" if note else ""
        raise InputError(f"{path}: array {name!r}: expected shape {want} (the model's "
                         f"{name!r} is {_fmt_shape(shape)}{why}), got {_fmt_shape(a.shape)}")
    if a.dtype == dtype.numpy:
        return a
    if is_label and dtype.is_int and a.dtype.kind in "iu" and _fits(a, dtype.numpy):
        notes.append(f"{path}: array {name!r}: converted {a.dtype} to {dtype} (exact)")
        return a.astype(dtype.numpy)
    hint = (" (integer labels must fit it exactly)" if is_label and a.dtype.kind in "iu"
            else f" (convert the array with .astype('{dtype}'))")
    raise InputError(f"{path}: array {name!r}: expected dtype {dtype}, got {a.dtype}{hint}")


def _fits(a: np.ndarray, dtype: np.dtype) -> bool:
    if a.size == 0:
        return True
    info = np.iinfo(dtype)
    return info.min <= int(a.min()) and int(a.max()) <= info.max


def _check_examples(path: str, specs: Sequence[ArraySpec],
                    arrays: dict[str, np.ndarray]) -> None:
    first = specs[0][0]
    n = arrays[first].shape[0]
    for spec in specs:
        m = arrays[spec[0]].shape[0]
        if m != n:
            raise InputError(f"{path}: array {spec[0]!r} has {m} examples, array {first!r} "
                             f"has {n} (examples are on the first axis)")
    if n == 0:
        raise InputError(f"{path}: array {first!r}: no examples (the first axis is 0)")


def _check_symbols(path: str, specs: Sequence[ArraySpec],
                   arrays: dict[str, np.ndarray]) -> None:
    """Every non-batch axis is at least 1, and a symbol means one size in every array."""
    bound: dict[str, tuple[int, str, int]] = {}  # symbol -> (size, array, axis)
    for name, _, shape in specs:
        for axis, (d, n) in enumerate(zip(tuple(shape)[1:], arrays[name].shape[1:]), start=1):
            if n == 0:
                raise InputError(f"{path}: array {name!r}: axis {axis} is empty (shape "
                                 f"{_fmt_shape(arrays[name].shape)})")
            if not isinstance(d, str):
                continue
            if d in bound and bound[d][0] != n:
                size, other, other_axis = bound[d]
                raise InputError(f"{path}: array {name!r}: axis {axis} ({d}) is {n}, but "
                                 f"axis {other_axis} of array {other!r} makes {d} = {size}")
            bound.setdefault(d, (n, name, axis))


def _check_finite(path: str, name: str, a: np.ndarray) -> None:
    with np.errstate(over="ignore", invalid="ignore"):
        if math.isfinite(np.add.reduce(a, axis=None)):
            return  # one pass, no copy: a NaN or an infinity anywhere makes the sum one
    bad = np.flatnonzero(~np.isfinite(a))  # (or finite values whose sum overflows: none bad)
    if bad.size:
        index = tuple(int(i) for i in np.unravel_index(int(bad[0]), a.shape))
        raise InputError(f"{path}: array {name!r}: {bad.size} value(s) are NaN or infinite, "
                         f"the first {a[index]} at index {list(index)}; training on them "
                         f"would diverge")


def _check_labels(path: str, name: str, a: np.ndarray, classes: int,
                  ignore_index: int | None) -> None:
    if a.size == 0 or (int(a.min()) >= 0 and int(a.max()) < classes):
        return
    ok = (a >= 0) & (a < classes)
    if ignore_index is not None:
        ok |= a == ignore_index
    bad = np.flatnonzero(~ok)
    if bad.size:
        index = tuple(int(i) for i in np.unravel_index(int(bad[0]), a.shape))
        allowed = f"[0, {classes})" + (f" or {ignore_index}" if ignore_index is not None else "")
        raise InputError(f"{path}: array {name!r}: {bad.size} label(s) outside the class "
                         f"range {allowed}, the first {int(a[index])} at index {list(index)}")


def _check_int(field: str, value: object, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise GradcError(f"{field}: expected an integer >= {least}, got {value!r}")


def _names(names: Sequence[str]) -> str:
    return ", ".join(repr(n) for n in names)


def _fmt_shape(shape: Sequence[object]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
