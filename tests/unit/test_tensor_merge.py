"""Merging a batch's inputs (runtime/tensors.concatenate): same values as np.concatenate, aligned."""

from __future__ import annotations

import numpy as np
import pytest

from sonic.server.runtime.tensors import ALIGN_BYTES, ALIGN_MIN_BYTES, concatenate


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8, np.float16, np.bool_])
@pytest.mark.parametrize("rows", [(1,), (1, 2, 3), (4, 4, 4, 4)])
def test_concatenate_matches_numpy_and_is_aligned(dtype: type[np.generic], rows: tuple[int, ...]) -> None:
    rng = np.random.default_rng(len(rows))
    # Odd trailing sizes, so a 16-byte-aligned allocation would not be 64-byte aligned by chance.
    row = (37, ALIGN_MIN_BYTES // 37 + 3)  # odd sizes, one row alone past the aligning threshold
    parts = [(rng.random((n, *row)) * 100).astype(dtype) for n in rows]
    merged = concatenate(parts)
    np.testing.assert_array_equal(merged, np.concatenate(parts))
    assert merged.dtype == dtype
    assert merged.ctypes.data % ALIGN_BYTES == 0
    assert merged.flags.c_contiguous
    assert merged.flags.writeable


def test_small_merges_are_plain_concatenations() -> None:
    parts = [np.arange(16, dtype=np.float32).reshape(1, 16), np.ones((2, 16), np.float32)]
    np.testing.assert_array_equal(concatenate(parts), np.concatenate(parts))


def test_concatenate_bytes_tensors_stay_objects() -> None:
    parts = [np.array([[b"a"], [b"bc"]], dtype=np.object_), np.array([[b""]], dtype=np.object_)]
    merged = concatenate(parts)
    assert merged.dtype == np.object_
    assert merged.tolist() == [[b"a"], [b"bc"], [b""]]
