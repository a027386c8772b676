"""The replay's pure parts: requests per second and the fidelity figure."""

from __future__ import annotations

import pytest

from sonic.perf.replay import ReplayConfig, ReplayReport, per_second
from sonic.traffic.requests import recorded_parameters

pytestmark = pytest.mark.unit


def test_requests_are_counted_per_second_from_zero() -> None:
    assert per_second([]) == []
    assert per_second([0, 999_999_999, 1_000_000_000, 3_500_000_000]) == [2, 1, 0, 1]


def _report(recorded: list[int], sent: list[int]) -> ReplayReport:
    return ReplayReport(duration_s=1.0, models={}, recorded_per_s=recorded, sent_per_s=sent, late=0)


def test_fidelity_is_one_for_a_copy_and_falls_with_misplaced_requests() -> None:
    assert _report([5, 5], [5, 5]).fidelity == 1.0
    assert _report([10, 0], [5, 5]).fidelity == 0.5  # half of the requests in the wrong second
    assert _report([4], [2, 2]).fidelity == 0.5
    assert _report([], []).fidelity == 1.0


@pytest.mark.parametrize(("option", "value"), [("time_scale", 0.0), ("synthetic", "noise")])
def test_bad_replay_settings_are_refused(tmp_path: object, option: str, value: object) -> None:
    with pytest.raises(ValueError, match=r"must be > 0|synthetic inputs"):
        ReplayConfig(traffic_dir=tmp_path, address="x", **{option: value})  # type: ignore[arg-type]


def test_the_parameters_a_server_acts_on_are_replayed() -> None:
    row = {"sequence_id": "42", "sequence_start": True, "sequence_end": False, "priority": 2, "timeout_us": 0}
    assert recorded_parameters(row) == {
        "sequence_id": 42,
        "sequence_start": True,
        "sequence_end": False,
        "priority": 2,
    }
    row |= {"sequence_id": "run-7", "priority": 0, "timeout_us": 500}
    assert recorded_parameters(row) == {
        "sequence_id": "run-7",
        "sequence_start": True,
        "sequence_end": False,
        "timeout": 500,
    }
    assert recorded_parameters({"sequence_id": "", "priority": 0, "timeout_us": 0}) == {}
