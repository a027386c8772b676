"""The demo's results for a person: one summary table, and a single-page HTML report with the plots inside.

The report is one file (plots embedded as PNG data URIs, styles inline) so it opens in any browser
from wherever it is copied. Figures measured on this machine and projections for a GPU server are
kept apart and labelled as such.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

PLOTS = {
    "protodune": "protodune/breakdown.png",
    "hlt": "hlt/throughput.png",
    "miniaod": "miniaod/fractions.png",
}
TITLES = {
    "protodune": "ProtoDUNE EmTrkMichelId (seed 002)",
    "hlt": "HLT with FACILE, many client jobs (seed 000)",
    "miniaod": "MiniAOD: ParticleNet, DeepMET, DeepTau (seed 001)",
}
SUMMARY_HEADERS = (
    "demonstrator",
    "direct s/event",
    "service s/event (CPU server)",
    "same outputs",
    "GPU server s/event (projection)",
)


def _row(name: str, result: Mapping[str, Any]) -> list[Any]:
    gpu = result.get("gpu_projection", {}).get("time_per_event_s", "-")
    if name == "protodune":
        return [name, result["runs"]["direct"]["time_per_event_s"],
                result["gpu_projection"]["measured_cpu_server_s"], result["identical"], gpu]  # fmt: skip
    if name == "hlt":
        per_event = result["per_event"]
        return [name, per_event["direct_s"], per_event["service_s"], result["identical"], gpu]
    runs = result["runs"]
    return [name, runs["direct"]["time_per_event_s"], runs["service"]["time_per_event_s"],
            result["identical"], gpu]  # fmt: skip


def summary_rows(results: Mapping[str, Any]) -> list[list[Any]]:
    """One row per demonstrator that ran, in :data:`SUMMARY_HEADERS`' order."""
    return [_row(name, results[name]) for name in TITLES if name in results]


def plot_paths(out: Path, results: Mapping[str, Any]) -> list[Path]:
    return [out / PLOTS[name] for name in TITLES if name in results and (out / PLOTS[name]).is_file()]


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "<b class=bad>NO</b>"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.4g}"
    return html.escape(str(value))


def html_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def embedded_png(path: Path, alt: str) -> str:
    if not path.is_file():
        return f"<p class=note>plot not written: {html.escape(str(path))}</p>"
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _projection(gpu: Mapping[str, Any] | None) -> str:
    if not gpu:
        return ""
    rows = [
        ["time per event, this run with this CPU as the server (measured)", gpu["measured_cpu_server_s"]],
        ["time per event with a GPU server (projected)", gpu["time_per_event_s"]],
        ["server time per event on the GPU (projected)", gpu["gpu_s"]],
        ["client jobs one GPU server takes before they wait (projected)", gpu["clients_per_server"]],
        ["events per second one GPU server sustains (projected)", gpu["server_events_per_s"]],
    ]
    return (
        "<div class=projection><h3>Projection: the same run with a GPU server</h3>"
        f"<p>Scaling model (<code>sonic.perf.scaling</code>); {html.escape(gpu['basis'])}.</p>"
        f"{html_table(['quantity', 'value'], rows)}"
        f"<p class=note>Measured on a GPU: {html.escape(gpu['gpu_measurement'])}.</p></div>"
    )


def _section_protodune(result: Mapping[str, Any]) -> str:
    headers = ["run", "non-ML s", "preprocessing s", "transfer + queue s", "travel s", "server s", "s/event",
               "same outputs"]  # fmt: skip
    keys = ["non_ml_s", "preprocessing_s", "transfer_s", "travel_s", "server_compute_s", "time_per_event_s"]
    rows = [
        [name, *(run[k] for k in keys), run["identical_to_direct"]] for name, run in result["runs"].items()
    ]
    scale = result["scaling"]
    text = (f"Measured with this CPU as the server: {scale['predicted_clients_per_server']:.1f} clients per "
            f"server (seed 002: {scale['seed_ratio_measured']:.0f} measured on T4 GPUs).")  # fmt: skip
    return html_table(headers, rows) + f"<p>{html.escape(text)}</p>"


def _section_hlt(result: Mapping[str, Any]) -> str:
    rows = [
        [int(on["clients"]), on["events_per_s"], off["events_per_s"], on["latency_mean_s"] * 1e3,
         off["latency_mean_s"] * 1e3]
        for on, off in zip(result["sweep"]["dynamic_batching"], result["sweep"]["no_dynamic_batching"],
                           strict=True)
    ]  # fmt: skip
    headers = [
        "clients",
        "events/s, dynamic batching",
        "events/s, none",
        "latency ms, dyn",
        "latency ms, none",
    ]
    fit = result["fit"]
    if "predicted_clients_per_server" in fit:
        text = f"Scaling-model fit to these points: {fit['predicted_clients_per_server']:.1f} clients per server."
    else:
        text = f"Scaling-model fit: {fit.get('error', 'not available')}."
    return html_table(headers, rows) + f"<p>{html.escape(text)}</p>"


def _section_miniaod(result: Mapping[str, Any]) -> str:
    rows = [[name, r["time_per_event_s"], r["rest_s"], r["ml_span_s"], 100 * r["ml_fraction"]]
            for name, r in result["runs"].items()]  # fmt: skip
    text = f"Seed 001: ML is {100 * result['seed_ml_fraction']:.1f} % of the event on a CPU."
    return html_table(["mode", "s/event", "rest s", "ML s", "ML %"], rows) + f"<p>{html.escape(text)}</p>"


SECTIONS = {"protodune": _section_protodune, "hlt": _section_hlt, "miniaod": _section_miniaod}

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 960px; margin: 2em auto; padding: 0 1em;
       color: #1d2430; line-height: 1.45; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { border-bottom: 2px solid #d5dbe5; padding-bottom: 0.2em; margin-top: 1.8em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.92em; }
th, td { border: 1px solid #cfd6e0; padding: 0.3em 0.6em; text-align: right; }
th { background: #eef2f7; } td:first-child, th:first-child { text-align: left; }
img { max-width: 100%; border: 1px solid #e3e7ee; }
.note { color: #5a6472; font-size: 0.9em; }
.bad { color: #b00020; }
.status { font-size: 1.1em; padding: 0.5em 0.8em; border-radius: 6px; display: inline-block; }
.ok { background: #e4f4e6; } .fail { background: #fbe3e6; }
.projection { background: #fff8e6; border-left: 5px solid #e0a400; padding: 0.3em 1em; margin: 1em 0; }
.projection h3 { margin: 0.4em 0; }
"""


def write_html(path: Path, results: Mapping[str, Any], out: Path, log_path: Path | None = None) -> Path:
    """The report: status, summary table, then per demonstrator its table, plot and GPU projection."""
    names = [name for name in TITLES if name in results]
    identical = all(results[name]["identical"] for name in names)
    status = ("<p class='status ok'>Service outputs are bitwise identical to direct inference.</p>" if identical
              else "<p class='status fail'>Service outputs DIFFER from direct inference.</p>")  # fmt: skip
    parts = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        "<title>sonic demo report</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>sonic demo: direct inference vs the service</h1>",
        (
            f"<p class=note>{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {results.get('wall_s', 0):.0f} s. "
            "No GPU here: the server ran the models on this machine's CPU, so every measured service figure "
            "is a CPU server's; GPU figures are projections, marked as such.</p>"
        ),
        status,
        "<h2>Summary</h2>",
        html_table(SUMMARY_HEADERS, summary_rows(results)),
    ]
    for name in names:
        parts += [f"<h2>{html.escape(TITLES[name])}</h2>", "<h3>Measured on this machine</h3>"]
        parts += [SECTIONS[name](results[name]), embedded_png(out / PLOTS[name], TITLES[name])]
        parts.append(_projection(results[name].get("gpu_projection")))
    if log_path is not None:
        parts.append(f"<p class=note>Log: {html.escape(str(log_path))}</p>")
    parts.append("</body></html>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
