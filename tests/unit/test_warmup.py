"""Warm-up samples from model_warmup, and the merged-batch warm-up of dynamically batched models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sonic.protocol.errors import ModelConfigError
from sonic.protocol.model_config import parse_config_text, validate_config
from sonic.server.models.paths import ModelFiles
from sonic.server.models.warmup import warmup_samples

BASE = """
name: "m"
max_batch_size: 64
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "N" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def samples(text: str, model_dir: Path = Path(), **kw: bool) -> list:  # type: ignore[type-arg]
    config = parse_config_text(BASE + text, "test")
    return warmup_samples(config, validate_config(config), ModelFiles(config.name, model_dir), **kw)


def test_dynamic_batching_warms_the_largest_merged_shapes_first() -> None:
    found = samples("dynamic_batching { preferred_batch_size: [ 8, 32 ] }")
    assert [(s.name, s.batch_size, s.count) for s in found] == [
        ("merged batch 64", 64, 1),
        ("merged batch 32", 32, 1),
        ("merged batch 8", 8, 1),
    ]
    assert found[0].inputs["X"].shape == (64, 4)
    assert found[0].inputs["N"].dtype == np.int32


@pytest.mark.parametrize(
    "text",
    [
        "",  # no dynamic batcher: every execution has the request's own shape
        'dynamic_batching { } parameters { key: "warmup_merged_batches" value { string_value: "0" } }',
    ],
)
def test_no_merged_warmup(text: str) -> None:
    assert samples(text) == []
    assert samples("dynamic_batching { }", merged_batches=False) == []


def test_model_warmup_replaces_the_default(tmp_path: Path) -> None:
    (tmp_path / "warmup").mkdir()
    (tmp_path / "warmup" / "n.bin").write_bytes(np.array([7, 8], dtype=np.int32).tobytes())
    found = samples(
        'dynamic_batching { } model_warmup [ { name: "w" batch_size: 3 count: 2 inputs [ '
        '{ key: "X" value { data_type: TYPE_FP32 dims: [ 4 ] random_data: true } }, '
        '{ key: "N" value { data_type: TYPE_INT32 dims: [ 2 ] input_data_file: "n.bin" } } ] } ]',
        tmp_path,
    )
    assert [(s.name, s.batch_size, s.count) for s in found] == [("w", 3, 2)]
    assert found[0].inputs["N"].tolist() == [[7, 8]] * 3
    x = found[0].inputs["X"]
    assert x.shape == (3, 4)
    assert ((x >= 0) & (x < 1)).all()


def test_a_file_of_the_wrong_size_is_refused(tmp_path: Path) -> None:
    (tmp_path / "warmup").mkdir()
    (tmp_path / "warmup" / "n.bin").write_bytes(b"\0" * 12)
    with pytest.raises(ModelConfigError, match="warmup 'w' input 'N'"):
        samples(
            'model_warmup [ { name: "w" batch_size: 1 inputs { key: "N" value { data_type: TYPE_INT32 '
            'dims: [ 2 ] input_data_file: "n.bin" } } } ]',
            tmp_path,
        )
