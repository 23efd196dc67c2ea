"""gradc.train_data: loading, checking and batching the data file of ``gradc train``."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from gradc.errors import GradcError, InputError
from gradc.train_data import load_dataset

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "digits.npz"
X = ("x", "float32", ("N", 3))
LABELS = ("labels", "int64", ("N",))


def write(tmp_path: Path, **arrays: np.ndarray) -> Path:
    path = tmp_path / "data.npz"
    np.savez(path, **arrays)  # type: ignore[arg-type]
    return path


def good(n: int = 10) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((n, 3)).astype(np.float32),
            "labels": rng.integers(0, 4, n).astype(np.int64)}


def refused(path: Path, *needles: str, **kwargs: object) -> str:
    kwargs.setdefault("label", LABELS)
    kwargs.setdefault("classes", 4)
    with pytest.raises(InputError) as e:
        load_dataset(path, [X], **kwargs)  # type: ignore[arg-type]
    message = str(e.value)
    assert str(path) in message
    for needle in needles:
        assert needle in message, message
    return message


def test_good_file_loads(tmp_path: Path) -> None:
    data = good()
    ds = load_dataset(write(tmp_path, **data), [X], label=LABELS, classes=4)
    assert ds.size == len(ds) == 10 and ds.notes == ()
    assert list(ds.arrays) == ["x", "labels"]
    np.testing.assert_array_equal(ds.arrays["x"], data["x"])


def test_missing_file(tmp_path: Path) -> None:
    refused(tmp_path / "nope.npz", "no such file")


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "data.npz"
    path.write_bytes(b"")
    refused(path, "empty file")


def test_not_npz(tmp_path: Path) -> None:
    path = tmp_path / "data.npz"
    np.save(path, np.zeros(3))  # an .npy, not an archive
    Path(str(path) + ".npy").rename(path)
    refused(path, "not an .npz archive")
    path.write_text("x,labels\n1,2\n")
    refused(path, "not an .npz archive")


def test_corrupt_member(tmp_path: Path) -> None:
    buf = io.BytesIO()
    np.save(buf, np.zeros((10, 3), np.float32))
    path = tmp_path / "data.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("x.npy", buf.getvalue()[:-8])  # header claims more than is stored
        z.writestr("labels.npy", b"garbage")
    refused(path, "'x'", "truncated")


def test_archive_without_arrays(tmp_path: Path) -> None:
    path = tmp_path / "data.npz"
    np.savez(path)
    refused(path, "no arrays")


def test_pickled_objects_are_not_loaded(tmp_path: Path) -> None:
    data = good()
    path = tmp_path / "data.npz"
    np.savez(path, x=np.array([object()] * 10, dtype=object), labels=data["labels"])
    refused(path, "'x'", "objects")


def test_missing_array(tmp_path: Path) -> None:
    refused(write(tmp_path, x=good()["x"]), "missing array 'labels'")


def test_extra_array(tmp_path: Path) -> None:
    refused(write(tmp_path, **good(), weights=np.ones(10)), "unexpected array 'weights'")


def test_dtype_mismatch(tmp_path: Path) -> None:
    data = good()
    refused(write(tmp_path, x=data["x"].astype(np.float64), labels=data["labels"]),
            "'x'", "expected dtype float32, got float64")


def test_float_labels_refused(tmp_path: Path) -> None:
    data = good()
    refused(write(tmp_path, x=data["x"], labels=data["labels"].astype(np.float32)),
            "'labels'", "expected dtype int64, got float32")


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.int16, np.uint64])
def test_other_int_width_labels_converted_exactly(tmp_path: Path, dtype: type) -> None:
    data = good()
    ds = load_dataset(write(tmp_path, x=data["x"], labels=data["labels"].astype(dtype)), [X],
                      label=LABELS, classes=4)
    assert ds.arrays["labels"].dtype == np.int64
    np.testing.assert_array_equal(ds.arrays["labels"], data["labels"])
    assert len(ds.notes) == 1 and "converted" in ds.notes[0] and "exact" in ds.notes[0]


def test_labels_too_wide_for_int64_refused(tmp_path: Path) -> None:
    data = good()
    labels = data["labels"].astype(np.uint64)
    labels[3] = 2 ** 63
    refused(write(tmp_path, x=data["x"], labels=labels), "'labels'", "uint64")


def test_shape_mismatch(tmp_path: Path) -> None:
    data = good()
    refused(write(tmp_path, x=data["x"].reshape(10, 3, 1), labels=data["labels"]),
            "'x'", "(examples, 3)", "(10, 3, 1)")
    refused(write(tmp_path, x=np.zeros((10, 4), np.float32), labels=data["labels"]),
            "'x'", "(10, 4)")


def test_example_counts_differ(tmp_path: Path) -> None:
    data = good()
    refused(write(tmp_path, x=data["x"], labels=data["labels"][:9]),
            "'labels' has 9 examples", "'x' has 10")


def test_zero_examples(tmp_path: Path) -> None:
    refused(write(tmp_path, x=np.zeros((0, 3), np.float32), labels=np.zeros(0, np.int64)),
            "no examples")


def test_labels_outside_class_range(tmp_path: Path) -> None:
    data = good()
    data["labels"][7] = 4
    refused(write(tmp_path, **data), "'labels'", "[0, 4)", "first 4 at index [7]")
    data["labels"][7] = -1
    refused(write(tmp_path, **data), "first -1 at index [7]")


def test_ignore_index_allowed(tmp_path: Path) -> None:
    data = good()
    data["labels"][[2, 5]] = -100
    ds = load_dataset(write(tmp_path, **data), [X], label=LABELS, classes=4, ignore_index=-100)
    assert (ds.arrays["labels"] == -100).sum() == 2
    refused(write(tmp_path, **data), "-100", ignore_index=-1)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_inputs_refused(tmp_path: Path, bad: float) -> None:
    data = good()
    data["x"][6, 2] = bad
    refused(write(tmp_path, **data), "'x'", "NaN or infinite", "index [6, 2]")


def test_non_finite_mse_target_refused(tmp_path: Path) -> None:
    target = np.zeros((10, 2), np.float32)
    target[1, 0] = np.nan
    spec = ("target", "float32", ("N", 2))
    refused(write(tmp_path, x=good()["x"], target=target), "'target'", "index [1, 0]",
            label=spec, classes=None)


def test_symbols_bind_consistently(tmp_path: Path) -> None:
    x = np.zeros((2, 1, 4, 5), np.float32)
    inputs = [("x", "float32", ("N", 1, "H", "W"))]
    seg = ("labels", "int64", ("N", "H", "W"))
    ds = load_dataset(write(tmp_path, x=x, labels=np.zeros((2, 4, 5), np.int64)), inputs,
                      label=seg, classes=3)
    assert ds.size == 2
    path = write(tmp_path, x=x, labels=np.zeros((2, 4, 6), np.int64))
    with pytest.raises(InputError, match=r"'labels': axis 2 \(W\) is 6.*'x' makes W = 5"):
        load_dataset(path, inputs, label=seg, classes=3)



def test_big_endian_and_fortran_arrays_accepted(tmp_path: Path) -> None:
    data = good()
    x = np.asfortranarray(data["x"].astype(">f4"))
    ds = load_dataset(write(tmp_path, x=x, labels=data["labels"]), [X], label=LABELS, classes=4)
    assert ds.arrays["x"].dtype == np.float32 and ds.arrays["x"].flags.c_contiguous
    np.testing.assert_array_equal(ds.arrays["x"], data["x"])


def test_batches_cover_every_example_once(tmp_path: Path) -> None:
    data = good(10)
    ds = load_dataset(write(tmp_path, **data), [X], label=LABELS, classes=4)
    batches = ds.batches(4, shuffle=True, seed=3)
    assert len(batches) == 3
    got = list(batches.epoch_batches(1))
    assert [len(b["x"]) for b in got] == [4, 4, 2]
    order = batches.order(1)
    np.testing.assert_array_equal(np.sort(order), np.arange(10))
    xs = np.concatenate([b["x"] for b in got])
    np.testing.assert_array_equal(xs, data["x"][order])
    np.testing.assert_array_equal(np.concatenate([b["labels"] for b in got]),
                                  data["labels"][order])
    assert all(b["x"].flags.c_contiguous for b in got)


def test_batch_order_is_deterministic_per_seed_and_epoch(tmp_path: Path) -> None:
    ds = load_dataset(write(tmp_path, **good(50)), [X], label=LABELS, classes=4)
    a, b = ds.batches(8, seed=7), ds.batches(8, seed=7)
    np.testing.assert_array_equal(a.order(2), b.order(2))
    expected = np.random.Generator(np.random.PCG64(np.random.SeedSequence([7, 2]))).permutation(50)
    np.testing.assert_array_equal(a.order(2), expected)
    assert not np.array_equal(a.order(0), a.order(1))
    assert not np.array_equal(a.order(0), ds.batches(8, seed=8).order(0))
    first = [x["x"] for x in a]  # iterating is epoch 0
    np.testing.assert_array_equal(np.concatenate(first), ds.arrays["x"][a.order(0)])


def test_no_shuffle_and_drop_last(tmp_path: Path) -> None:
    data = good(10)
    ds = load_dataset(write(tmp_path, **data), [X], label=LABELS, classes=4)
    batches = ds.batches(3, shuffle=False, drop_last=True)
    assert len(batches) == 3
    got = list(batches.epoch_batches(5))
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in got]), data["x"][:9])
    with pytest.raises(GradcError, match="batch size 11"):
        ds.batches(11, drop_last=True)
    assert len(ds.batches(11)) == 1


@pytest.mark.parametrize("kwargs", [{"batch_size": 0}, {"batch_size": 2.0},
                                    {"batch_size": 2, "seed": -1}])
def test_bad_batch_arguments(tmp_path: Path, kwargs: dict[str, object]) -> None:
    ds = load_dataset(write(tmp_path, **good()), [X], label=LABELS, classes=4)
    with pytest.raises(GradcError):
        ds.batches(**kwargs)  # type: ignore[arg-type]


def test_bundled_digits_check_out() -> None:
    ds = load_dataset(DIGITS, [("x", "float32", ("N", 1, 8, 8))],
                      label=("labels", "int64", ("N",)), classes=10)
    assert ds.size == 1797
    labels, x = ds.arrays["labels"], ds.arrays["x"]
    assert labels.dtype == np.int64 and set(np.unique(labels)) == set(range(10))
    assert x.dtype == np.float32 and x.shape == (1797, 1, 8, 8)
    assert x.min() == 0.0 and x.max() == 1.0
    np.testing.assert_array_equal(x * 16, np.round(x * 16))  # pixel counts 0..16, in 16ths
    assert labels[:10].tolist() == list(range(10))  # scikit-learn's order starts 0, 1, ..., 9
    assert DIGITS.stat().st_size < 200_000


def test_bundled_digits_equal_scikit_learns() -> None:
    datasets = pytest.importorskip("sklearn.datasets")  # optional: only to re-derive the file
    bunch = datasets.load_digits()
    with np.load(DIGITS, allow_pickle=False) as f:
        np.testing.assert_array_equal(f["x"].reshape(-1, 64) * 16, bunch.data)
        np.testing.assert_array_equal(f["labels"], bunch.target)
