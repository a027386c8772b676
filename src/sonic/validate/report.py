"""``sonic validate``'s results for people and machines: a terminal table, an HTML page, JSON.

The page is in the style of ``sonic demo``'s report (:mod:`sonic.demos.report`: one file, styles inline,
plots embedded as PNG): the verdict, the summary table, then per output a histogram of the absolute
differences (log scale; exact agreements counted apart) and its worst requests with their ids and
recorded arrival times.
"""

from __future__ import annotations

import datetime as dt
import html
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sonic.demos.common import plot
from sonic.demos.report import STYLE, embedded_png, html_table
from sonic.validate.compare import ModelStats, OutputStats, RequestInfo, Tolerance
from sonic.validate.run import ValidationResult

HEADERS = (
    "model",
    "output",
    "type",
    "within tolerance",
    "requests",
    "outside",
    "max abs",
    "median abs",
    "max rel",
    "max ULP",
    "arg-max agree",
)


def _arrival(info: RequestInfo) -> str:
    return dt.datetime.fromtimestamp(info.arrival_unix_ns / 1e9, dt.UTC).isoformat(
        " ", timespec="milliseconds"
    )[:23]


def _number(value: float) -> Any:
    return value if math.isfinite(value) else str(value)


def _tolerance_text(tolerance: Tolerance, floating: bool) -> str:
    if not floating:
        return "exact"
    parts = [f"atol {tolerance.atol:g}", f"rtol {tolerance.rtol:g}"]
    if tolerance.max_ulp is not None:
        parts.append(f"max ULP {tolerance.max_ulp}")
    parts.append(f"{tolerance.allowed_fraction:g} allowed outside")
    return ", ".join(parts)


def summary_rows(result: ValidationResult) -> list[list[Any]]:
    """One row per model's statuses (when any disagreed) and per output, in :data:`HEADERS`' order."""
    rows: list[list[Any]] = []
    for model in result.models.values():
        if model.status_mismatches or model.unanswered or model.both_failed:
            what = f"{model.status_mismatches} differ, {model.unanswered} unanswered, {model.both_failed} failed alike"
            agree = not model.status_mismatches and not model.unanswered
            rows.append([model.model, "(status)", "", agree, model.requests, what, "", "", "", "", ""])
        for output in model.outputs.values():
            agreement = output.argmax_agreement
            rows.append([
                model.model,
                output.output,
                output.datatype,
                output.passed,
                output.requests,
                f"{output.elements_outside}/{output.elements}" + (f" +{output.structural} mismatched" if output.structural else ""),
                _number(output.max_abs) if output.floating else "",
                output.median("abs") if output.floating else "",
                _number(output.max_rel) if output.floating else "",
                _number(output.max_ulp) if output.floating else "",
                f"{agreement:.2%}" if agreement is not None else "",
            ])  # fmt: skip
    return rows


def terminal_table(result: ValidationResult) -> str:
    """The summary as plain text (PASS/FAIL per output), for any terminal or log."""
    cells = [
        [("PASS" if v else "FAIL") if isinstance(v, bool) else f"{v:.3g}" if isinstance(v, float) else str(v)
         for v in row]
        for row in summary_rows(result)
    ]  # fmt: skip
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(HEADERS)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(HEADERS, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def _request(info: RequestInfo) -> dict[str, Any]:
    return {"index": info.index, "request_id": info.request_id, "arrival": _arrival(info)}


def _output_json(output: OutputStats) -> dict[str, Any]:
    t = output.tolerance
    return {
        "datatype": output.datatype,
        "passed": output.passed,
        "requests": output.requests,
        "elements": output.elements,
        "elements_outside": output.elements_outside,
        "fraction_outside": output.fraction_outside,
        "tolerance": {
            "atol": t.atol,
            "rtol": t.rtol,
            "max_ulp": t.max_ulp,
            "allowed_fraction": t.allowed_fraction,
        }
        if output.floating
        else "exact",
        "max_abs": output.max_abs,
        "median_abs": output.median("abs"),
        "max_rel": output.max_rel,
        "median_rel": output.median("rel"),
        "max_ulp": output.max_ulp,
        "argmax_agreement": output.argmax_agreement,
        "mismatches": output.mismatches,
        "examples": [{**_request(info), "what": what} for info, what in output.examples],
        "worst": [
            {
                **_request(case.request),
                "max_abs": case.max_abs,
                "max_ulp": case.max_ulp,
                "elements_outside": case.elements_outside,
                "at": case.flat_index,
                "reference": case.reference_value,
                "candidate": case.candidate_value,
            }
            for case in output.worst_first()
        ],
    }


def _model_json(model: ModelStats) -> dict[str, Any]:
    return {
        "passed": model.passed,
        "requests": model.requests,
        "both_failed": model.both_failed,
        "status_mismatches": model.status_mismatches,
        "unanswered": model.unanswered,
        "examples": [{**_request(info), "what": what} for info, what in model.examples],
        "outputs": {name: _output_json(output) for name, output in model.outputs.items()},
    }


def report_json(result: ValidationResult, reference: str, candidate: str) -> dict[str, Any]:
    """Everything the run measured (infinite figures as the strings ``inf``)."""
    data = {
        "passed": result.passed and not result.unused,
        "reference": reference,
        "candidate": candidate,
        "requests": result.requests,
        "synthetic": result.synthetic,
        "duration_s": round(result.duration_s, 3),
        "unused_options": result.unused,
        "models": {name: _model_json(model) for name, model in result.models.items()},
    }
    finite: dict[str, Any] = _finite(data)
    return finite


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _draw_histogram(output: OutputStats) -> Any:
    def draw(axes: Any) -> None:
        sample = output.sample_abs
        exact = int(np.count_nonzero(sample == 0))
        finite = sample[(sample > 0) & np.isfinite(sample)]
        if finite.size:
            axes.hist(np.log10(finite), bins=60, color="#3a6ea5")
        tolerance = output.tolerance.atol
        if tolerance > 0:
            axes.axvline(math.log10(tolerance), color="#b00020", linestyle="--", label=f"atol {tolerance:g}")
            axes.legend(loc="upper left")
        axes.set_xlabel("log10 |candidate - reference|")
        axes.set_ylabel("elements")
        share = exact / sample.size if sample.size else 1.0
        axes.set_title(
            f"{output.model} / {output.output}: {share:.2%} of {sample.size} sampled elements exactly equal",
            fontsize=10,
        )
        if not finite.size:
            axes.text(0.5, 0.5, "no difference", ha="center", va="center", transform=axes.transAxes)

    return draw


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def _output_section(output: OutputStats, out: Path) -> list[str]:
    status = "within tolerance" if output.passed else "BEYOND TOLERANCE"
    title = (
        f"<h3>{html.escape(output.model)} / {html.escape(output.output)} ({html.escape(output.datatype)}): "
        f"<span class='{'ok' if output.passed else 'bad'}'>{status}</span></h3>"
    )
    parts = [
        title,
        f"<p class=note>Tolerance: {html.escape(_tolerance_text(output.tolerance, output.floating))}.</p>",
    ]
    if output.floating and output.elements:
        png = plot(out / f"hist-{_slug(output.model)}-{_slug(output.output)}.png", _draw_histogram(output))
        if png is not None:
            parts.append(embedded_png(png, f"differences of {output.output}"))
    worst = output.worst_first()
    if worst:
        rows = [
            [case.request.index, case.request.request_id, _arrival(case.request), _number(case.max_abs),
             _number(case.max_ulp), case.elements_outside, case.flat_index, case.reference_value,
             case.candidate_value]
            for case in worst
        ]  # fmt: skip
        headers = [
            "#",
            "request id",
            "arrival (UTC)",
            "max abs",
            "max ULP",
            "outside",
            "at",
            "reference",
            "candidate",
        ]
        parts += ["<h4>Worst requests</h4>", html_table(headers, rows)]
    if output.examples:
        rows = [[info.index, info.request_id, _arrival(info), what] for info, what in output.examples]
        parts += ["<h4>Mismatches</h4>", html_table(["#", "request id", "arrival (UTC)", "what"], rows)]
    return parts


def write_html(path: Path, result: ValidationResult, reference: str, candidate: str) -> Path:
    """The report page, with the histograms' PNG files beside it (and inside it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    passed = result.passed and not result.unused
    verdict = (
        "<p class='status ok'>Every output agrees within its tolerance.</p>"
        if passed
        else "<p class='status fail'>Outputs DIFFER beyond their tolerance (or a request was not answered).</p>"
    )
    parts = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        "<title>sonic validate report</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>sonic validate: reference vs candidate</h1>",
        f"<p>Reference <code>{html.escape(reference)}</code>, candidate <code>{html.escape(candidate)}</code>.</p>",
        (
            f"<p class=note>{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC: {result.requests} recorded requests "
            f"({result.synthetic} with seeded inputs) in {result.duration_s:.1f} s.</p>"
        ),
        verdict,
    ]
    parts += [f"<p class=bad>{html.escape(text)}</p>" for text in result.unused]
    parts += ["<h2>Summary</h2>", html_table(HEADERS, summary_rows(result))]
    for model in result.models.values():
        parts.append(f"<h2>{html.escape(model.model)}</h2>")
        if model.examples:
            rows = [[info.index, info.request_id, _arrival(info), what] for info, what in model.examples]
            parts += [
                "<h4>Answers that disagree in status</h4>",
                html_table(["#", "request id", "arrival", "what"], rows),
            ]
        for output in model.outputs.values():
            parts += _output_section(output, path.parent)
    parts.append("</body></html>")
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


def examples_text(result: ValidationResult, limit: int = 5) -> Sequence[str]:
    """A few lines on what failed, for the terminal."""
    lines: list[str] = []
    for model in result.models.values():
        lines += [
            f"  {model.model} #{i.index} ({i.request_id or 'no id'}): {what}" for i, what in model.examples
        ]
        for output in model.outputs.values():
            lines += [f"  {model.model}/{output.output} #{i.index} ({i.request_id or 'no id'}): {what}"
                      for i, what in output.examples]  # fmt: skip
    return lines[:limit]
