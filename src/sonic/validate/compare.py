"""How two answers to the same request are compared: pure numpy, no I/O.

Integers, BOOL and BYTES must be equal element for element. Floating point (FP16, BF16, FP32, FP64)
compares element ``c`` of the candidate with ``r`` of the reference: equal (NaN equals NaN, an infinity
equals itself, -0.0 equals +0.0), or ``|c - r| <= atol + rtol * |r|``, or (when ``max_ulp`` is set) at
most ``max_ulp`` representable values apart. An output passes when no request's answers differ in
structure (status and error message, datatype, shape, a missing output) and at most ``allowed_fraction`` of its elements
are outside. The figures: largest and median absolute and relative error, largest ULP distance, the
worst requests, and for classifier-like outputs (floating point, at least two columns in the last
dimension) how often the arg-max along the last dimension agrees.

ULP distance: the number of representable values between two floats of the same type, counted through
zero (-0.0 and +0.0 are one value); NaN against a number is infinitely far, NaN against NaN at 0.
"""

from __future__ import annotations

import enum
import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

FLOATING = frozenset({"FP16", "BF16", "FP32", "FP64"})
SAMPLE_ELEMENTS = 1 << 16  # differences kept per output for the median and the histogram
WORST_KEPT = 5  # worst requests kept per output
EXAMPLES_KEPT = 5  # first structural mismatches kept per output
NO_ANSWER = "NO ANSWER"  # the status of a target that did not answer before the tool's deadline


@dataclass(frozen=True)
class Tolerance:
    """What an output may differ by (floating point only; other types compare exactly)."""

    atol: float = 0.0
    rtol: float = 0.0
    max_ulp: int | None = None  # None: ULP distance is not a criterion
    allowed_fraction: float = 0.0  # of the output's elements, over the whole replay

    def __post_init__(self) -> None:
        if self.atol < 0 or self.rtol < 0 or (self.max_ulp is not None and self.max_ulp < 0):
            raise ValueError(f"tolerances are >= 0, got {self}")
        if not 0.0 <= self.allowed_fraction <= 1.0:
            raise ValueError(f"the fraction allowed outside is in [0, 1], got {self.allowed_fraction}")


@dataclass(frozen=True)
class Tolerances:
    """The global tolerance and those set per output (keys ``OUTPUT`` or ``MODEL/OUTPUT``)."""

    default: Tolerance = Tolerance()
    per_output: Mapping[str, Tolerance] = field(default_factory=dict)

    def key_for(self, model: str, output: str) -> str | None:
        """The per-output key that applies to ``model``'s ``output``, if any (``MODEL/OUTPUT`` first)."""
        for key in (f"{model}/{output}", output):
            if key in self.per_output:
                return key
        return None

    def of(self, model: str, output: str) -> Tolerance:
        key = self.key_for(model, output)
        return self.default if key is None else self.per_output[key]


@dataclass(frozen=True)
class Tensor:
    """One output of an answer."""

    datatype: str
    shape: tuple[int, ...]
    array: npt.NDArray[Any]


@dataclass(frozen=True)
class Answer:
    """What a target answered: ``status`` is ``OK``, a gRPC status name, or ``HTTP <code>``;
    ``http_status`` the HTTP status it maps to (for comparing an HTTP target with a gRPC one)."""

    status: str
    http_status: int
    message: str = ""
    outputs: Mapping[str, Tensor] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "OK"


@dataclass(frozen=True)
class RequestInfo:
    """Which recorded request an answer is to."""

    index: int  # position in the replay
    request_id: str
    arrival_unix_ns: int


class Messages(enum.StrEnum):
    """How error messages are compared."""

    EXACT = "exact"  # word for word
    STATUS = "status"  # not at all: the status alone (messages still shown), e.g. sonic against Triton,
    # whose words sonic keeps after its own context (docs/triton-differences.md, error-context)


def statuses_agree(reference: Answer, candidate: Answer, messages: Messages = Messages.EXACT) -> bool:
    """Same status and message (``messages``); across protocols (an ``HTTP`` status against a gRPC one)
    the HTTP status each maps to."""
    if messages is Messages.EXACT and reference.message != candidate.message:
        return False
    if reference.status.startswith("HTTP ") != candidate.status.startswith("HTTP "):
        return reference.ok == candidate.ok and reference.http_status == candidate.http_status
    return reference.status == candidate.status


def ulp_distance(reference: npt.NDArray[Any], candidate: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
    """Representable values between paired elements of two float arrays of one type (float64 counts)."""
    if reference.dtype != candidate.dtype or reference.dtype.kind not in "fV":
        raise TypeError(
            f"ULP distance needs two arrays of one float type, got {reference.dtype}, {candidate.dtype}"
        )
    ints = np.dtype(f"<i{reference.dtype.itemsize}")
    magnitude_mask = np.int64((1 << (8 * reference.dtype.itemsize - 1)) - 1)
    bits_r = np.ascontiguousarray(reference).view(ints).astype(np.int64)
    bits_c = np.ascontiguousarray(candidate).view(ints).astype(np.int64)
    mag_r, mag_c = bits_r & magnitude_mask, bits_c & magnitude_mask
    same_side = (bits_r < 0) == (bits_c < 0)
    # Same sign: the magnitudes' difference is exact in int64. Opposite signs: the path through zero,
    # summed in float64 (both magnitudes may be near 2**63 for FP64).
    distance = np.where(
        same_side,
        np.abs(mag_r - mag_c).astype(np.float64),
        mag_r.astype(np.float64) + mag_c.astype(np.float64),
    )
    nan_r, nan_c = _isnan(reference), _isnan(candidate)
    distance[nan_r != nan_c] = math.inf
    distance[nan_r & nan_c] = 0.0
    return distance


def _isnan(array: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    return np.isnan(array.astype(np.float64))  # BF16 (ml_dtypes) included


@dataclass(frozen=True)
class Differences:
    """Element-wise differences of one floating-point output of one request."""

    absolute: npt.NDArray[np.float64]
    relative: npt.NDArray[np.float64]
    ulp: npt.NDArray[np.float64]
    outside: npt.NDArray[np.bool_]


def float_differences(
    reference: npt.NDArray[Any], candidate: npt.NDArray[Any], tolerance: Tolerance
) -> Differences:
    """The element-wise differences of two float arrays of one type and shape, and which are outside."""
    r = reference.astype(np.float64).ravel()
    c = candidate.astype(np.float64).ravel()
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        absolute = np.abs(c - r)
        relative = absolute / np.abs(r)
    equal = (r == c) | (np.isnan(r) & np.isnan(c))
    absolute[equal] = 0.0
    relative[equal] = 0.0
    absolute[np.isnan(absolute)] = math.inf  # NaN against a number, or inf - inf of opposite signs
    relative[np.isnan(relative)] = math.inf
    ulp = ulp_distance(reference.ravel(), candidate.ravel())
    with np.errstate(invalid="ignore", over="ignore"):
        # An infinite difference is outside whatever the tolerance (rtol times an infinity included).
        inside = equal | (np.isfinite(absolute) & (absolute <= tolerance.atol + tolerance.rtol * np.abs(r)))
    if tolerance.max_ulp is not None:
        inside |= ulp <= tolerance.max_ulp
    return Differences(absolute, relative, ulp, ~inside)


def argmax_agreement(reference: npt.NDArray[Any], candidate: npt.NDArray[Any]) -> tuple[int, int] | None:
    """Rows whose arg-max along the last dimension agree, and rows, for a classifier-like output."""
    if reference.ndim < 2 or reference.shape[-1] < 2 or reference.size == 0:
        return None
    r = reference.astype(np.float64).reshape(-1, reference.shape[-1])
    c = candidate.astype(np.float64).reshape(-1, candidate.shape[-1])
    return int(np.sum(np.argmax(r, axis=1) == np.argmax(c, axis=1))), r.shape[0]


@dataclass(frozen=True, order=True)
class WorstCase:
    """One request among an output's worst: ordered by its largest difference."""

    max_abs: float
    max_ulp: float
    elements_outside: int
    request: RequestInfo = field(compare=False)
    flat_index: int = field(compare=False)  # where its largest difference is (row-major)
    reference_value: str = field(compare=False)
    candidate_value: str = field(compare=False)


@dataclass
class OutputStats:
    """Everything the replay learns of one model's output, bounded in memory whatever its length."""

    model: str
    output: str
    tolerance: Tolerance
    datatype: str = ""
    requests: int = 0
    elements: int = 0
    elements_outside: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    max_ulp: float = 0.0
    argmax_agree: int = 0
    argmax_rows: int = 0
    mismatches: int = 0  # requests whose output differs in structure or, for exact types, in value
    structural: int = 0  # of them, in structure: datatype, shape, a missing output
    examples: list[tuple[RequestInfo, str]] = field(default_factory=list)
    worst: list[WorstCase] = field(default_factory=list)  # a min-heap of the worst WORST_KEPT
    sample_abs: npt.NDArray[np.float64] = field(default_factory=lambda: np.empty(0), repr=False)
    sample_rel: npt.NDArray[np.float64] = field(default_factory=lambda: np.empty(0), repr=False)
    _sample_keys: npt.NDArray[np.float64] = field(default_factory=lambda: np.empty(0), repr=False)
    _rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0), repr=False)

    @property
    def floating(self) -> bool:
        return self.datatype in FLOATING

    @property
    def passed(self) -> bool:
        if self.mismatches:
            return False
        allowed = self.tolerance.allowed_fraction if self.floating else 0.0
        return self.elements_outside <= allowed * self.elements

    @property
    def fraction_outside(self) -> float:
        return self.elements_outside / self.elements if self.elements else 0.0

    @property
    def argmax_agreement(self) -> float | None:
        return self.argmax_agree / self.argmax_rows if self.argmax_rows else None

    def median(self, which: str) -> float:
        sample = self.sample_abs if which == "abs" else self.sample_rel
        return float(np.median(sample)) if sample.size else 0.0

    def mismatch(self, request: RequestInfo, what: str, *, structural: bool = True) -> None:
        self.mismatches += 1
        self.structural += structural
        if len(self.examples) < EXAMPLES_KEPT:
            self.examples.append((request, what))

    def add(self, request: RequestInfo, reference: Tensor, candidate: Tensor) -> None:
        """One request's output from both targets."""
        self.requests += 1
        self.datatype = self.datatype or reference.datatype
        if reference.datatype != candidate.datatype:
            self.mismatch(request, f"datatype {candidate.datatype}, reference {reference.datatype}")
            return
        if reference.shape != candidate.shape:
            self.mismatch(request, f"shape {list(candidate.shape)}, reference {list(reference.shape)}")
            return
        self.elements += reference.array.size
        if reference.datatype in FLOATING:
            self._add_floating(request, reference.array, candidate.array)
            return
        differ = reference.array.ravel() != candidate.array.ravel()
        count = int(np.count_nonzero(differ))
        if count:
            self.elements_outside += count
            first = int(np.argmax(differ))
            values = reference.array.ravel()[first], candidate.array.ravel()[first]
            self.mismatch(
                request,
                f"{count} elements differ; first at {first}: {values[1]!r}, reference {values[0]!r}",
                structural=False,
            )

    def _add_floating(
        self, request: RequestInfo, reference: npt.NDArray[Any], candidate: npt.NDArray[Any]
    ) -> None:
        found = float_differences(reference, candidate, self.tolerance)
        outside = int(np.count_nonzero(found.outside))
        self.elements_outside += outside
        agreement = argmax_agreement(reference, candidate)
        if agreement is not None:
            self.argmax_agree += agreement[0]
            self.argmax_rows += agreement[1]
        if not found.absolute.size:
            return
        worst_at = int(np.argmax(found.absolute))
        case = WorstCase(
            float(found.absolute[worst_at]),
            float(found.ulp.max()),
            outside,
            request,
            worst_at,
            repr(float(reference.ravel()[worst_at])),
            repr(float(candidate.ravel()[worst_at])),
        )
        self.max_abs = max(self.max_abs, case.max_abs)
        self.max_rel = max(self.max_rel, float(found.relative.max()))
        self.max_ulp = max(self.max_ulp, case.max_ulp)
        if case.max_abs > 0 or outside:
            if len(self.worst) < WORST_KEPT:
                heapq.heappush(self.worst, case)
            elif case > self.worst[0]:
                heapq.heapreplace(self.worst, case)
        self._sample(found.absolute, found.relative)

    def _sample(self, absolute: npt.NDArray[np.float64], relative: npt.NDArray[np.float64]) -> None:
        """Keep a uniform sample of SAMPLE_ELEMENTS differences: every element gets a random key and the
        smallest keys stay (exact while the output has fewer elements than that)."""
        keys = np.concatenate([self._sample_keys, self._rng.random(absolute.size)])
        values_abs = np.concatenate([self.sample_abs, absolute])
        values_rel = np.concatenate([self.sample_rel, relative])
        if keys.size > SAMPLE_ELEMENTS:
            keep = np.argpartition(keys, SAMPLE_ELEMENTS)[:SAMPLE_ELEMENTS]
            keys, values_abs, values_rel = keys[keep], values_abs[keep], values_rel[keep]
        self._sample_keys, self.sample_abs, self.sample_rel = keys, values_abs, values_rel

    def worst_first(self) -> list[WorstCase]:
        return sorted(self.worst, reverse=True)


@dataclass
class ModelStats:
    """One model's replay: answers whose status agreed or not, and each output's figures."""

    model: str
    requests: int = 0
    both_failed: int = 0  # the same error from both: agreement, nothing to compare
    status_mismatches: int = 0
    unanswered: int = 0  # a target gave no answer before the deadline
    examples: list[tuple[RequestInfo, str]] = field(default_factory=list)
    outputs: dict[str, OutputStats] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return (
            not self.status_mismatches
            and not self.unanswered
            and all(o.passed for o in self.outputs.values())
        )


def compare_answers(
    stats: ModelStats,
    request: RequestInfo,
    reference: Answer,
    candidate: Answer,
    tolerances: Tolerances,
    renames: Mapping[str, str] | None = None,
    messages: Messages = Messages.EXACT,
) -> None:
    """Add one request's two answers to ``stats``; ``renames`` maps reference output names to the
    candidate's where they differ."""
    stats.requests += 1
    if NO_ANSWER in (reference.status, candidate.status):
        stats.unanswered += 1
        if len(stats.examples) < EXAMPLES_KEPT:
            stats.examples.append((request, _status_text(reference, candidate)))
        return
    if not statuses_agree(reference, candidate, messages):
        stats.status_mismatches += 1
        if len(stats.examples) < EXAMPLES_KEPT:
            stats.examples.append((request, _status_text(reference, candidate)))
        return
    if not reference.ok:
        stats.both_failed += 1
        return
    renames = renames or {}
    candidate_names = {renames.get(name, name) for name in reference.outputs}
    for name, tensor in reference.outputs.items():
        output = stats.outputs.get(name)
        if output is None:
            output = stats.outputs[name] = OutputStats(stats.model, name, tolerances.of(stats.model, name))
        other = candidate.outputs.get(renames.get(name, name))
        if other is None:
            output.requests += 1
            output.mismatch(
                request, f"output '{renames.get(name, name)}' missing from the candidate's answer"
            )
            continue
        output.add(request, tensor, other)
    for extra in sorted(set(candidate.outputs) - candidate_names):
        key = f"{extra} (candidate only)"
        output = stats.outputs.get(key)
        if output is None:
            output = stats.outputs[key] = OutputStats(stats.model, key, tolerances.default)
        output.requests += 1
        output.mismatch(request, f"output '{extra}' is in the candidate's answer only")


def _status_text(reference: Answer, candidate: Answer) -> str:
    def one(answer: Answer) -> str:
        return "OK" if answer.ok else f"{answer.status}: {answer.message}"

    return f"reference {one(reference)}; candidate {one(candidate)}"
