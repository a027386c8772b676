"""``sonic serve``'s request buffer budget: the request bodies all connections may buffer together
(``sonic.server.budget``, docs/security.md)."""

from __future__ import annotations

import argparse

from sonic.server.budget import DEFAULT_WAIT_S
from sonic.server.config import BudgetConfig


def add_budget_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("request buffer budget (HTTP and h2 gRPC)")
    budget_help = "MiB of request bodies all connections may buffer (default: 1/4 of memory, 64 MiB-16 GiB)"
    group.add_argument("--request-buffer-budget-mb", type=int, default=None, help=budget_help)
    wait_help = "longest wait for room in that budget, then 503 / RESOURCE_EXHAUSTED"
    group.add_argument("--request-buffer-wait-secs", type=float, default=DEFAULT_WAIT_S, help=wait_help)


def budget_config_from_args(args: argparse.Namespace) -> BudgetConfig:
    mib: int | None = args.request_buffer_budget_mb
    if mib is None:  # the machine's (or the container's) share: BudgetConfig's default
        return BudgetConfig(wait_s=args.request_buffer_wait_secs)
    if mib < 1:
        raise ValueError(f"--request-buffer-budget-mb must be at least 1, got {mib}")
    return BudgetConfig(total_bytes=mib << 20, wait_s=args.request_buffer_wait_secs)
