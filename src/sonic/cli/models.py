"""``sonic models``: build the reference models as a ready model repository."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from sonic.models.build import build_repository
from sonic.models.zoo import registry


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("models", help="build or list the reference models")
    actions = parser.add_subparsers(dest="action", required=True)
    build = actions.add_parser("build", help="export models to ONNX and write a model repository")
    build.add_argument("--out", type=Path, default=Path("model_repository"), help="repository folder")
    build.add_argument("--models", nargs="+", default=None, metavar="NAME", help="subset (default: all)")
    build.add_argument(
        "--torchscript",
        action="store_true",
        help="also write NAME_torchscript TorchScript variants for a pytorch backend",
    )
    build.set_defaults(run=run_build)
    listing = actions.add_parser("list", help="list the reference models")
    listing.set_defaults(run=run_list)


def run_build(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    try:
        paths = build_repository(args.out, args.models, torchscript=args.torchscript)
    except (KeyError, ImportError) as exc:
        print(f"sonic models build: {exc.args[0]}")
        return 2
    for path in paths:
        print(f"  {path}")
    print(f"built {len(paths)} model(s) in {args.out} ({time.perf_counter() - start:.1f} s)")
    return 0


def run_list(args: argparse.Namespace) -> int:  # noqa: ARG001  (subcommand signature)
    for model in registry().values():
        print(
            f"{model.name:20s} {model.parameter_count:>12,d} params  batch {model.seed_batch_size:>6d}  {model.description}"
        )
    return 0
