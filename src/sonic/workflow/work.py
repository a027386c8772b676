"""Emulated CPU work: real floating-point computation calibrated to take a given time.

The demonstrators stand in for the non-ML reconstruction (seed 002's 110 s per event, the rest of
the HLT or of MiniAOD) with this work. It is computation, not a sleep, so it competes for the CPU
with everything else exactly as real reconstruction would.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

_SIZE = 48  # small matrices: BLAS runs them on the calling thread, so streams scale like real code


def _matrix(seed: int) -> npt.NDArray[np.float64]:
    # Gain above 1 keeps the values of order one under tanh: no decay to zero or denormals, so every
    # round costs the same.
    matrix: npt.NDArray[np.float64] = np.random.default_rng(seed).standard_normal((_SIZE, _SIZE))
    scaled: npt.NDArray[np.float64] = matrix * (1.5 / np.sqrt(_SIZE))
    return scaled


def _unit(matrix: npt.NDArray[np.float64], rounds: int) -> float:
    acc = matrix
    for _ in range(rounds):
        acc = np.tanh(acc @ matrix)
    return float(acc[0, 0])


@dataclass(frozen=True)
class CpuWork:
    """``units_per_s`` units of work take one second on this machine (measured by :meth:`calibrate`)."""

    units_per_s: float

    @classmethod
    def calibrate(cls, duration_s: float = 0.2) -> CpuWork:
        matrix = _matrix(0)
        _unit(matrix, 50)  # warm caches and BLAS before timing
        rounds = 0
        start = time.perf_counter()
        while (elapsed := time.perf_counter() - start) < duration_s:
            _unit(matrix, 100)
            rounds += 100
        return cls(units_per_s=rounds / elapsed)

    def run(self, seconds: float, seed: int = 0) -> float:
        """Do ``seconds`` worth of work (as calibrated, on an idle core); returns a checksum."""
        if seconds <= 0:
            return 0.0
        matrix = _matrix(seed)
        return _unit(matrix, max(1, round(seconds * self.units_per_s)))
