"""Whether a candidate configuration beats the current one, from paired replays (``sonic analyze --traffic``).

Each candidate was replayed in the same rounds as the current configuration (the order alternating), so
each round gives one paired ratio: the candidate's p99 over the current configuration's p99 in that round.
On a shared machine one replay's noise is as large as the gains looked for (a factor of two on the
demos' traces, docs/perf.md), so a single ratio decides nothing. The rule:

- a candidate *qualifies* when it was measured in every round with no failed request and its median p99
  meets the SLO;
- it *beats* the current configuration when it qualifies and either its p99 was lower in every round, or
  its median gain is larger than the spread of its ratios (``1 - median > spread``, the spread being half
  the range ``(max - min) / 2`` of the ratios);
- of those that beat it, the one with the lowest median ratio is recommended; if none does, the answer is
  "keep the current configuration".

Pure: it takes numbers and gives a decision, so it is tested on fixed inputs (tests/unit/perf/test_decide.py).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PairedRounds:
    """One candidate's replays and the current configuration's in the same rounds."""

    name: str
    candidate_p99_ms: tuple[float | None, ...]  # per round; None: not measured (server failed, budget)
    current_p99_ms: tuple[float | None, ...]
    failed: int = 0  # failed requests over the candidate's replays

    def ratios(self) -> tuple[float, ...]:
        return tuple(
            mine / theirs
            for mine, theirs in zip(self.candidate_p99_ms, self.current_p99_ms, strict=True)
            if mine is not None and theirs is not None and theirs > 0
        )


@dataclass(frozen=True)
class Verdict:
    name: str
    ratios: tuple[float, ...]  # candidate p99 / current p99, per round
    median_ratio: float | None
    spread: float | None  # half the range of the ratios
    median_p99_ms: float | None
    qualifies: bool
    beats_current: bool
    why: str


@dataclass(frozen=True)
class Decision:
    verdicts: tuple[Verdict, ...]  # best median ratio first; unmeasured last
    recommended: Verdict | None  # None: keep the current configuration

    @property
    def keep_current(self) -> bool:
        return self.recommended is None


def _median(values: Sequence[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def judge(paired: PairedRounds, slo_p99_ms: float) -> Verdict:
    ratios = paired.ratios()
    median_p99 = _median(paired.candidate_p99_ms)
    if not ratios or len(ratios) < len(paired.candidate_p99_ms):
        return Verdict(
            paired.name, ratios, None, None, median_p99, False, False, "not measured in every round"
        )
    median = statistics.median(ratios)
    spread = (max(ratios) - min(ratios)) / 2
    figures = (paired.name, ratios, median, spread, median_p99)
    if paired.failed:
        return Verdict(*figures, False, False, f"{paired.failed} request(s) failed")
    if median_p99 is None or median_p99 > slo_p99_ms:
        return Verdict(*figures, False, False, f"median p99 {median_p99} ms misses the SLO {slo_p99_ms:g} ms")
    if max(ratios) < 1:
        return Verdict(*figures, True, True, "lower p99 in every round")
    if 1 - median > spread:
        return Verdict(*figures, True, True, f"median gain {1 - median:.3f} > spread {spread:.3f}")
    return Verdict(*figures, True, False, f"within noise: median ratio {median:.3f}, spread ±{spread:.3f}")


def decide(candidates: Sequence[PairedRounds], slo_p99_ms: float) -> Decision:
    verdicts = sorted(
        (judge(paired, slo_p99_ms) for paired in candidates),
        key=lambda v: (v.median_ratio is None, v.median_ratio if v.median_ratio is not None else 0.0),
    )
    winners = [verdict for verdict in verdicts if verdict.beats_current]
    return Decision(tuple(verdicts), winners[0] if winners else None)
