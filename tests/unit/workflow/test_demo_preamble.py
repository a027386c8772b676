"""The demonstrators' shared preamble: the models timed directly, the emulated rest sized from them."""

from __future__ import annotations

import pytest

from sonic.demos.common import calibrate

pytestmark = pytest.mark.unit


def test_calibrate_warms_up_once_then_times_the_mean_of_its_repeats() -> None:
    calls: list[int] = []
    ml_s, rest_s = calibrate(lambda: calls.append(1), configured_s=None, per_ml=9.0, repeats=5)
    assert len(calls) == 6  # one untimed call builds the runtime for these shapes
    assert ml_s > 0
    assert rest_s == pytest.approx(9.0 * ml_s)


def test_a_configured_rest_wins_over_the_measured_proportion() -> None:
    ml_s, rest_s = calibrate(lambda: None, configured_s=0.2, per_ml=9.0)
    assert ml_s >= 0
    assert rest_s == 0.2
