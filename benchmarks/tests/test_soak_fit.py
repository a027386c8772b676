"""The pure parts of benchmarks/soak.py (in soak_fit.py): the slope fit, its window, the CSV and /proc parsing."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmarks import soak_fit

pytestmark = pytest.mark.unit


def _samples(rss_mb: list[float], period_s: float = 5.0) -> list[soak_fit.Sample]:
    # Anonymous RSS: the whole RSS less 50 MB of libraries.
    return [
        soak_fit.Sample(i * period_s, int(mb * soak_fit.MB), int((mb - 50) * soak_fit.MB), i * 10, i, 0)
        for i, mb in enumerate(rss_mb)
    ]


def test_slope_of_a_line_is_its_rate_per_minute() -> None:
    # 0.1 MB every 5 s is 1.2 MB/min.
    assert soak_fit.slope_per_minute([(t * 5.0, 100 + t * 0.1) for t in range(50)]) == pytest.approx(1.2)
    assert soak_fit.slope_per_minute([(0.0, 7.0), (60.0, 7.0)]) == 0.0


def test_slope_needs_two_distinct_times() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        soak_fit.slope_per_minute([(0.0, 1.0)])
    with pytest.raises(ValueError, match="one time"):
        soak_fit.slope_per_minute([(3.0, 1.0), (3.0, 2.0)])


def test_fit_window_is_the_last_20_minutes_or_two_thirds_of_a_short_run() -> None:
    assert soak_fit.fit_window_s(30) == 20 * 60
    assert soak_fit.fit_window_s(60) == 20 * 60
    assert soak_fit.fit_window_s(3) == pytest.approx(120.0)


def test_summary_fits_only_the_window_so_warm_up_growth_is_ignored() -> None:
    # 10 minutes of growth (warm-up), then 20 flat minutes: the slope of the window is 0.
    warm_up = [100 + i for i in range(120)]
    samples = _samples([*warm_up, *[220.0] * 241])
    report = soak_fit.summarize(samples, soak_fit.fit_window_s(30))
    assert report["slope_mb_per_min"] == pytest.approx(0.0)
    assert report["within_target"] is True
    assert report["rss_start_mb"] == pytest.approx(100.0)
    assert report["rss_end_mb"] == pytest.approx(220.0)
    assert report["rss_anon_start_mb"] == pytest.approx(50.0)
    assert report["rss_anon_end_mb"] == pytest.approx(170.0)
    leaking = soak_fit.summarize(_samples([100 + i * 0.1 for i in range(361)]), soak_fit.fit_window_s(30))
    assert leaking["slope_mb_per_min"] == pytest.approx(1.2)
    assert leaking["within_target"] is False


def test_the_target_is_on_anonymous_memory_not_on_dropped_library_pages() -> None:
    # 30 MB of file-backed pages dropped by the kernel halfway: the whole RSS falls, the anonymous is flat.
    samples = [
        soak_fit.Sample(i * 5.0, int((140 if i < 180 else 110) * soak_fit.MB), 60 * soak_fit.MB, i, 0, 0)
        for i in range(361)
    ]
    report = soak_fit.summarize(samples, soak_fit.fit_window_s(30))
    assert report["slope_mb_per_min"] == pytest.approx(0.0)
    assert report["rss_slope_mb_per_min"] < -1.0


def test_csv_round_trip(tmp_path: Path) -> None:
    samples = _samples([1.5, 2.5, 3.0])
    soak_fit.write_csv(tmp_path / "rss.csv", samples)
    assert soak_fit.read_csv(tmp_path / "rss.csv") == samples
    assert (tmp_path / "rss.csv").read_text().splitlines()[0] == (
        "elapsed_s,rss_bytes,rss_anon_bytes,calls,expected_errors,unexpected_errors"
    )


def test_status_parsing() -> None:
    status = "Name:\tpython\nVmPeak:\t  900 kB\nVmRSS:\t  1234 kB\nRssAnon:\t  1000 kB\nThreads:\t4\n"
    assert soak_fit.parse_status(status) == (1234 * 1024, 1000 * 1024)
    assert soak_fit.parse_status("Name:\tzombie\nState:\tZ\n") == (0, 0)
    with pytest.raises(ValueError, match="expected kB"):
        soak_fit.parse_status("VmRSS:\t 12 MB\n")
