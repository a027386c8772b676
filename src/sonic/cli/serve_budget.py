"""``sonic serve``'s request buffer budget: the request bodies all connections may buffer together
(``sonic.server.budget``, docs/security.md); and the allocator threshold under which those buffers are
reused rather than mapped afresh per request (``sonic.server.malloc``)."""

from __future__ import annotations

import argparse
import logging

from sonic.server.budget import DEFAULT_WAIT_S
from sonic.server.config import BudgetConfig
from sonic.server.malloc import DEFAULT_MMAP_THRESHOLD_MB, MallocSetting, fix_mmap_threshold

log = logging.getLogger(__name__)


def add_budget_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("request buffer budget (HTTP and h2 gRPC)")
    budget_help = "MiB of request bodies all connections may buffer (default: 1/4 of memory, 64 MiB-16 GiB)"
    group.add_argument("--request-buffer-budget-mb", type=int, default=None, help=budget_help)
    wait_help = "longest wait for room in that budget, then 503 / RESOURCE_EXHAUSTED"
    group.add_argument("--request-buffer-wait-secs", type=float, default=DEFAULT_WAIT_S, help=wait_help)
    malloc_help = (
        "glibc's mmap threshold, fixed: request and response buffers under it are reused from the heap, "
        f"not mapped and zeroed afresh per request (default: {DEFAULT_MMAP_THRESHOLD_MB}; "
        "0: glibc's own, dynamic up to 32 MiB)"
    )
    group.add_argument("--malloc-mmap-threshold-mb", type=int, default=None, metavar="MB", help=malloc_help)


def budget_config_from_args(args: argparse.Namespace) -> BudgetConfig:
    mib: int | None = args.request_buffer_budget_mb
    if mib is None:  # the machine's (or the container's) share: BudgetConfig's default
        return BudgetConfig(wait_s=args.request_buffer_wait_secs)
    if mib < 1:
        raise ValueError(f"--request-buffer-budget-mb must be at least 1, got {mib}")
    return BudgetConfig(total_bytes=mib << 20, wait_s=args.request_buffer_wait_secs)


def apply_malloc_threshold(args: argparse.Namespace) -> MallocSetting | None:
    """Fix the process's mmap threshold as ``--malloc-mmap-threshold-mb`` says, once, before serving
    (None: 0, glibc's own). Where it cannot be fixed, a flag given says so in the log."""
    mib: int | None = args.malloc_mmap_threshold_mb
    if mib is not None and mib < 0:
        raise ValueError(f"--malloc-mmap-threshold-mb must be 0 or more, got {mib}")
    if mib == 0:
        return None
    outcome = fix_mmap_threshold((mib or DEFAULT_MMAP_THRESHOLD_MB) << 20)
    if outcome is not MallocSetting.FIXED:
        level = logging.DEBUG if mib is None else logging.WARNING
        log.log(level, "--malloc-mmap-threshold-mb %s: no effect here (%s)", mib, outcome.value)
    return outcome
