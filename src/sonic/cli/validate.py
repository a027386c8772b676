"""``sonic validate``: recorded requests replayed to a reference and a candidate, outputs compared.

Before a workflow moves from one inference setup to another (Triton to ``sonic serve``, FP32 to FP16,
version 3 to 4, TorchScript to ONNX), its recorded traffic (``sonic serve --traffic-log``) is sent to
both and every output compared within the tolerances given here (:mod:`sonic.validate`). Prints a
table (PASS/FAIL per output), writes ``OUT/report.html`` (histograms, worst requests) and
``OUT/report.json``; exit status 1 when any output is beyond its tolerance or a request went
unanswered, 2 for bad options (an option that named nothing the replay met included).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sonic.validate.compare import Tolerances
    from sonic.validate.run import ValidateConfig


def _setting(text: str) -> tuple[str, str]:
    name, sep, value = text.rpartition("=")
    return (name, value) if sep else ("", text)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "validate", help="replay recorded traffic to a reference and a candidate; compare outputs"
    )
    parser.add_argument(
        "--traffic", type=Path, required=True, metavar="DIR", help="sonic serve --traffic-log DIR"
    )
    target = (
        "[grpc://]HOST:PORT[/MODEL[:VERSION]], http://HOST:PORT[/...] or direct:REPOSITORY[/MODEL[:VERSION]]"
    )
    parser.add_argument("--reference", required=True, metavar="TARGET", help=f"what is trusted: {target}")
    parser.add_argument("--candidate", required=True, metavar="TARGET", help=f"what is checked: {target}")
    parser.add_argument("--model", action="append", default=[], help="only this recorded model (repeatable)")
    parser.add_argument(
        "--synthetic",
        action="store_true",
        help="also the requests recorded without contents, with seeded inputs of their recorded shapes",
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of the synthetic inputs (default 0)")
    parser.add_argument("--max-requests", type=int, default=0, help="only the first N requests (0: all)")
    group = parser.add_argument_group(
        "tolerances (floating point; integers, BOOL and BYTES compare exactly); VALUE for every output, "
        "OUTPUT=VALUE or MODEL/OUTPUT=VALUE for one; default: exact"
    )
    for flag, metavar, text in (
        ("--atol", "[OUTPUT=]V", "absolute difference"),
        ("--rtol", "[OUTPUT=]V", "times |reference|"),
        ("--max-ulp", "[OUTPUT=]N", "representable values apart (an element passes by any one criterion)"),
        ("--allow-fraction", "[OUTPUT=]F", "fraction of an output's elements allowed outside (default 0)"),
    ):
        group.add_argument(flag, action="append", default=[], type=_setting, metavar=metavar, help=text)
    parser.add_argument(
        "--rename",
        action="append",
        default=[],
        metavar="REF=CAND",
        help="the candidate's name for a reference input or output (e.g. a TorchScript model's INPUT__0)",
    )
    parser.add_argument(
        "--messages",
        default="exact",
        choices=["exact", "status"],
        help="error messages must match word for word (exact), or only the statuses (status: e.g. sonic against "
        "Triton, whose words sonic keeps after its own context)",
    )
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight at once")
    parser.add_argument("--timeout-s", type=float, default=30.0, help="deadline of each request, per target")
    parser.add_argument(
        "--transport",
        default=None,
        choices=["h2", "grpcio", "native"],
        help="gRPC client stack (default h2; 'native' is its old name)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("sonic-validate"), help="report.html, report.json, plots"
    )
    parser.set_defaults(run=run)


def tolerances(args: argparse.Namespace) -> Tolerances:
    """The global tolerance and the per-output ones, each output's unset fields the global values."""
    from sonic.validate.compare import Tolerance, Tolerances  # noqa: PLC0415

    fields: dict[str, tuple[str, Callable[[str], Any]]] = {
        "atol": ("atol", float),
        "rtol": ("rtol", float),
        "max_ulp": ("max_ulp", int),
        "allow_fraction": ("allowed_fraction", float),
    }
    glob: dict[str, Any] = {}
    per: dict[str, dict[str, Any]] = {}
    for option, (name, convert) in fields.items():
        for output, text in getattr(args, option):
            try:
                value = convert(text)
            except ValueError:
                flag = "--" + option.replace("_", "-")
                given = f"{output}={text}" if output else text
                raise ValueError(f"{flag} {given}: expected a number ({convert.__name__})") from None
            (per.setdefault(output, {}) if output else glob)[name] = value
    default = Tolerance(**glob)
    return Tolerances(default, {key: Tolerance(**(glob | values)) for key, values in per.items()})


def _renames(texts: list[str]) -> dict[str, str]:
    renames = {}
    for text in texts:
        old, sep, new = text.partition("=")
        if not sep or not old or not new:
            raise ValueError(f"--rename {text}: expected REFERENCE_NAME=CANDIDATE_NAME")
        renames[old] = new
    return renames


def _progress(total: int) -> Callable[[int], None] | None:
    try:
        from sonic.demos.console import Progress  # noqa: PLC0415  (rich: the demo extra)

        return Progress("validating requests", total)
    except ImportError:
        return None


def validate_config(args: argparse.Namespace) -> ValidateConfig:
    """What the command line asks for; ValueError naming the option where it is wrong or would change nothing."""
    from sonic.client.config import TransportKind  # noqa: PLC0415  (the command's imports when it runs)
    from sonic.validate.compare import Messages  # noqa: PLC0415
    from sonic.validate.run import ValidateConfig  # noqa: PLC0415
    from sonic.validate.source import SourceConfig  # noqa: PLC0415
    from sonic.validate.targets import Scheme, TargetSpec  # noqa: PLC0415

    if args.seed is not None and not args.synthetic:
        msg = "--seed sets the synthetic inputs: it needs --synthetic"
        raise ValueError(msg)
    source = SourceConfig(
        args.traffic,
        tuple(args.model),
        synthetic=args.synthetic,
        seed=args.seed or 0,
        max_requests=args.max_requests,
    )
    config = ValidateConfig(
        source=source,
        reference=TargetSpec.parse(args.reference),
        candidate=TargetSpec.parse(args.candidate),
        tolerances=tolerances(args),
        renames=_renames(args.rename),
        concurrency=args.concurrency,
        timeout_s=args.timeout_s,
        transport=TransportKind(args.transport or "h2"),
        messages=Messages(args.messages),
    )
    if args.transport is not None and Scheme.GRPC not in (
        config.reference.protocol,
        config.candidate.protocol,
    ):
        msg = "--transport chooses the gRPC client: neither target is gRPC"
        raise ValueError(msg)
    return config


def run(args: argparse.Namespace) -> int:
    from sonic.validate import report  # noqa: PLC0415  (the command's imports when it runs)
    from sonic.validate.run import validate  # noqa: PLC0415
    from sonic.validate.source import count_requests  # noqa: PLC0415

    try:
        config = validate_config(args)
        result = asyncio.run(validate(config, _progress(count_requests(config.source))))
    except ValueError as exc:
        print(f"sonic validate: {exc}", file=sys.stderr)
        return 2
    reference, candidate = str(config.reference), str(config.candidate)
    print(
        f"sonic validate: {result.requests} requests ({result.synthetic} synthetic) in {result.duration_s:.1f} s"
    )
    print(f"  reference {reference}\n  candidate {candidate}")
    print(report.terminal_table(result))
    for line in report.examples_text(result):
        print(line)
    args.out.mkdir(parents=True, exist_ok=True)
    data = report.report_json(result, reference, candidate)
    (args.out / "report.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    page = report.write_html(args.out / "report.html", result, reference, candidate)
    print(f"report: {page.resolve()}\ndata:   {(args.out / 'report.json').resolve()}")
    for text in result.unused:
        print(f"sonic validate: {text}", file=sys.stderr)
    if result.unused:
        return 2
    if not result.requests:
        print(
            "sonic validate: no request was sent (none recorded with contents? try --synthetic)",
            file=sys.stderr,
        )
        return 1
    print("validate: " + ("PASS" if result.passed else "FAIL: outputs beyond their tolerance"))
    return 0 if result.passed else 1
