"""The decision of ``sonic analyze --traffic`` on fixed paired rounds: a clear win, a gain within the noise,
a worse candidate, and the qualifications (failed requests, the SLO, a round not measured)."""

from __future__ import annotations

import pytest
from tritonclient.grpc import model_config_pb2

from sonic.perf.analyze import Candidate, candidate_config
from sonic.perf.analyze_traffic import completed
from sonic.perf.decide import PairedRounds, decide, judge

CURRENT = (100.0, 120.0, 90.0)
SLO_MS = 200.0


def test_a_clear_win_is_recommended() -> None:
    win = PairedRounds("batching", (40.0, 50.0, 45.0), CURRENT)
    decision = decide([win], SLO_MS)
    assert decision.recommended is not None
    assert decision.recommended.name == "batching"
    verdict = decision.recommended
    assert verdict.ratios == pytest.approx((0.4, 50 / 120, 0.5))
    assert verdict.median_ratio == pytest.approx(50 / 120)
    assert verdict.why == "lower p99 in every round"
    assert not decision.keep_current


def test_a_gain_within_the_noise_keeps_the_current_configuration() -> None:
    # Better in two rounds, worse in one: median ratio 0.9 (gain 0.1), spread (1.5 - 0.8) / 2 = 0.35.
    noisy = PairedRounds("noisy", (80.0, 180.0, 81.0), CURRENT)
    decision = decide([noisy], SLO_MS)
    assert decision.keep_current
    (verdict,) = decision.verdicts
    assert verdict.qualifies
    assert not verdict.beats_current
    assert verdict.median_ratio == pytest.approx(0.9)
    assert verdict.spread == pytest.approx(0.35)
    assert verdict.why.startswith("within noise")


def test_a_median_gain_larger_than_the_spread_wins_without_every_round() -> None:
    # Ratios 0.5, 0.55, 1.05: worse once, but the median gain 0.45 exceeds the spread 0.275.
    paired = PairedRounds("mostly", (50.0, 66.0, 94.5), CURRENT)
    verdict = judge(paired, SLO_MS)
    assert verdict.beats_current
    assert verdict.why.startswith("median gain")


def test_a_worse_candidate_is_ranked_last_and_not_recommended() -> None:
    worse = PairedRounds("worse", (150.0, 170.0, 140.0), CURRENT)
    win = PairedRounds("win", (50.0, 60.0, 45.0), CURRENT)
    decision = decide([worse, win], SLO_MS)
    assert [v.name for v in decision.verdicts] == ["win", "worse"]
    assert decision.recommended is not None
    assert decision.recommended.name == "win"
    assert decide([worse], SLO_MS).keep_current


def test_failures_the_slo_and_missing_rounds_disqualify() -> None:
    failing = judge(PairedRounds("failing", (40.0, 50.0, 45.0), CURRENT, failed=2), SLO_MS)
    assert not failing.qualifies
    assert failing.why == "2 request(s) failed"
    slow = judge(PairedRounds("slow", (40.0, 50.0, 45.0), CURRENT), 30.0)
    assert not slow.qualifies
    assert "misses the SLO" in slow.why
    missing = judge(PairedRounds("missing", (40.0, None, 45.0), CURRENT), SLO_MS)
    assert not missing.qualifies
    assert missing.median_ratio is None
    assert decide([], SLO_MS).keep_current


def test_completed_configs_compare_equal_when_a_server_would_serve_them_alike() -> None:
    base = model_config_pb2.ModelConfig(name="m", backend="onnxruntime", max_batch_size=8)
    base.dynamic_batching.max_queue_delay_microseconds = 100
    base.instance_group.add(kind=model_config_pb2.ModelInstanceGroup.KIND_CPU, name="its_own_name")
    # onnxruntime on CPU gets two instances by default, and dynamic batching prefers max_batch_size.
    same = candidate_config(
        base, Candidate(2, 8, dynamic_batching=True, preferred_batch_sizes=(8,), max_queue_delay_us=100)
    )
    assert completed(same) == completed(base)
    other_delay = candidate_config(base, Candidate(2, 8, dynamic_batching=True, max_queue_delay_us=0))
    assert completed(other_delay) != completed(base)
    one_instance = candidate_config(base, Candidate(1, 8, dynamic_batching=True, max_queue_delay_us=100))
    assert completed(one_instance) != completed(base)
