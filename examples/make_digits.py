"""Derive examples/digits.npz from scikit-learn's bundled copy of the UCI 8x8 digits.

Source: ``sklearn.datasets.load_digits()`` (the file sklearn/datasets/data/digits.csv.gz inside
the scikit-learn wheel), which is the test set (optdigits.tes, 1,797 images) of the UCI Machine
Learning Repository's "Optical Recognition of Handwritten Digits" data set by E. Alpaydin and
C. Kaynak (Bogazici University, 1998). See examples/README.md for origin and licence.

scikit-learn is needed only to run this script, not by gradc::

    .venv/bin/pip install scikit-learn
    .venv/bin/python examples/make_digits.py      # writes examples/digits.npz

The output holds ``x``: float32, (1797, 1, 8, 8), pixel counts 0..16 divided by 16 (exact in
float32), and ``labels``: int64, (1797,), the digit 0..9; both in scikit-learn's order.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits

OUT = Path(__file__).resolve().parent / "digits.npz"


def derive() -> dict[str, np.ndarray]:
    """The arrays of digits.npz, from scikit-learn's copy of the data."""
    bunch = load_digits()
    images = np.asarray(bunch.images)
    if images.shape != (1797, 8, 8) or images.min() < 0 or images.max() > 16:
        raise SystemExit(f"unexpected digits data: shape {images.shape}")
    if not np.array_equal(images, np.round(images)):
        raise SystemExit("unexpected digits data: pixel counts are not integers")
    x = (images.astype(np.float32) / np.float32(16)).reshape(-1, 1, 8, 8)
    labels = np.asarray(bunch.target).astype(np.int64)
    return {"x": np.ascontiguousarray(x), "labels": labels}


def main() -> int:
    """Write digits.npz next to this script."""
    arrays = derive()
    np.savez_compressed(OUT, **arrays)  # type: ignore[arg-type]
    print(f"wrote {OUT}: x {arrays['x'].dtype}{list(arrays['x'].shape)}, "
          f"labels {arrays['labels'].dtype}{list(arrays['labels'].shape)}, "
          f"{OUT.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
