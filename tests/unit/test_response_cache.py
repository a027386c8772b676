"""The response cache's size accounting and LRU eviction."""

from __future__ import annotations

import numpy as np
import pytest

from sonic.protocol.types import OutputTensor
from sonic.server.cache import ResponseCache

pytestmark = pytest.mark.unit


def _outputs(value: float, count: int = 25) -> list[OutputTensor]:
    return [OutputTensor("Y", "FP32", (count,), np.full(count, value, np.float32))]  # 100 bytes


def test_lru_eviction_by_size() -> None:
    cache = ResponseCache(max_bytes=3 * (100 + 1))
    for index in range(3):
        cache.put(bytes([index]), _outputs(index))
    assert len(cache) == 3
    assert cache.get(b"\x00") is not None  # touch 0: 1 is now the least recently used
    cache.put(b"\x03", _outputs(3))
    assert cache.get(b"\x01") is None
    assert cache.get(b"\x00") is not None
    assert cache.used_bytes == 3 * 101
    cache.put(b"big", _outputs(9, count=1000))  # larger than the whole cache: not stored
    assert cache.get(b"big") is None
    assert len(cache) == 3


def test_stored_outputs_are_private_copies() -> None:
    cache = ResponseCache(max_bytes=10_000)
    batch = np.zeros((2, 25), np.float32)
    cache.put(b"k", [OutputTensor("Y", "FP32", (25,), batch[0])])
    batch[0] = 7  # the model's buffer is reused: the cached answer must not change
    stored = cache.get(b"k")
    assert stored is not None
    assert stored[0].array.tolist() == [0.0] * 25
    assert not stored[0].array.flags.writeable
