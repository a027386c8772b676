"""``sonic validate``'s inputs: target addresses, the recorded requests read lazily (contents decoded,
BYTES included; seeded synthetic inputs), and tolerances as the command line sets them."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
from tests.integration.traffic.trace import record, write_records

from sonic.cli import validate as cli
from sonic.traffic.schema import iter_traffic
from sonic.validate.compare import Tolerance
from sonic.validate.source import SourceConfig, count_requests, recorded_requests
from sonic.validate.targets import Scheme, TargetSpec

pytestmark = pytest.mark.unit


def test_network_targets_parse_with_optional_model_and_version() -> None:
    assert TargetSpec.parse("127.0.0.1:8001") == TargetSpec(Scheme.GRPC, "127.0.0.1:8001")
    assert TargetSpec.parse("grpc://h:1/m:3") == TargetSpec(Scheme.GRPC, "h:1", "m", "3")
    assert TargetSpec.parse("http://h:8000/m") == TargetSpec(Scheme.HTTP, "h:8000", "m")
    assert str(TargetSpec.parse("http://h:8000/m:2")) == "http://h:8000/m:2"
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        TargetSpec.parse("localhost")
    with pytest.raises(ValueError, match="a version is a positive integer, got 'latest'"):
        TargetSpec.parse("h:1/m:latest")


def test_direct_targets_are_a_repository_or_a_model_folder_in_it(tmp_path: Path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    assert TargetSpec.parse(f"direct:{tmp_path}") == TargetSpec(Scheme.DIRECT, str(tmp_path))
    assert TargetSpec.parse(f"direct:{tmp_path}/m") == TargetSpec(Scheme.DIRECT, str(tmp_path), "m")
    assert TargetSpec.parse(f"direct:{tmp_path}/m:1") == TargetSpec(Scheme.DIRECT, str(tmp_path), "m", "1")
    with pytest.raises(ValueError, match="no such folder"):
        TargetSpec.parse(f"direct:{tmp_path}/nothing")
    with pytest.raises(ValueError, match="a version needs a model folder"):
        TargetSpec.parse(f"direct:{tmp_path}:2")


def _trace(directory: Path) -> None:
    records = []
    for index in range(10):
        values = np.full((1, 4), index, np.float32)
        records.append(record(index * 10.0, "a", {"X": ("FP32", values)}, request_id=f"a{index}",
                              keep_contents=index % 2 == 0))  # fmt: skip
    text = np.array([[b"one", "dr\u00e9i".encode()]], dtype=np.object_)
    records.append(
        record(15.0, "b", {"S": ("BYTES", text), "N": ("INT32", np.arange(3, dtype=np.int32)[None])})
    )
    write_records(directory, records)


def test_recorded_requests_merge_models_by_arrival_and_decode_contents(tmp_path: Path) -> None:
    _trace(tmp_path)
    requests = list(recorded_requests(SourceConfig(tmp_path)))
    assert [r.info.request_id for r in requests] == ["a0", "", "a2", "a4", "a6", "a8"]
    assert [r.info.index for r in requests] == list(range(6))
    strings = requests[1]
    assert strings.model == "b"
    assert strings.arrays["S"].tolist() == [[b"one", "dr\u00e9i".encode()]]  # BYTES as recorded, not made up
    assert strings.arrays["N"].tolist() == [[0, 1, 2]]
    assert strings.datatypes == {"S": "BYTES", "N": "INT32"}
    assert requests[2].arrays["X"].tolist() == [[2.0] * 4]
    assert not any(r.synthetic for r in requests)
    assert count_requests(SourceConfig(tmp_path)) == 6
    assert count_requests(SourceConfig(tmp_path, ("a",), max_requests=3)) == 3


def test_synthetic_inputs_are_seeded_and_of_the_recorded_shapes(tmp_path: Path) -> None:
    _trace(tmp_path)
    config = SourceConfig(tmp_path, ("a",), synthetic=True, seed=4)
    first, again = list(recorded_requests(config)), list(recorded_requests(config))
    assert len(first) == 10
    assert count_requests(config) == 10
    assert [r.synthetic for r in first] == [i % 2 == 1 for i in range(10)]
    for one, other in zip(first, again, strict=True):
        assert one.arrays["X"].shape == (1, 4)
        np.testing.assert_array_equal(one.arrays["X"], other.arrays["X"])  # the same inputs on every run
    other_seed = list(recorded_requests(SourceConfig(tmp_path, ("a",), synthetic=True, seed=5)))
    assert not np.array_equal(first[1].arrays["X"], other_seed[1].arrays["X"])


def test_the_trace_is_read_a_few_rows_at_a_time(tmp_path: Path) -> None:
    _trace(tmp_path)
    rows = iter_traffic(tmp_path, ("a",), batch_rows=2)
    assert next(rows)["request_id"] == "a0"
    assert next(rows)["request_id"] == "a1"
    assert len(list(rows)) == 8


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    return parser.parse_args(
        ["validate", "--traffic", "t", "--reference", "r:1", "--candidate", "c:1", *argv]
    )


def test_tolerances_per_output_take_the_global_values_they_do_not_set() -> None:
    tolerances = cli.tolerances(
        _args("--atol", "1e-6", "--rtol", "OUT=1e-3", "--max-ulp", "m/OUT=4", "--allow-fraction", "0.01")
    )
    assert tolerances.default == Tolerance(atol=1e-6, allowed_fraction=0.01)
    assert tolerances.per_output["OUT"] == Tolerance(atol=1e-6, rtol=1e-3, allowed_fraction=0.01)
    assert tolerances.per_output["m/OUT"] == Tolerance(atol=1e-6, max_ulp=4, allowed_fraction=0.01)
    with pytest.raises(ValueError, match=r"--max-ulp OUT=1.5: expected a number \(int\)"):
        cli.tolerances(_args("--max-ulp", "OUT=1.5"))
