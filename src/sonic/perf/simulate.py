"""Discrete-event simulation of N client jobs against M inference servers with dynamic batching.

Extrapolates measurements at small N (a few clients on one server) to the scales of the seed
studies (2,500 jobs on 100 GPUs; 270 processes on 4 GPUs) where the closed-form model of
:mod:`sonic.perf.scaling` only gives the two asymptotes. Each client loops over events: CPU work
(``cpu_s``, optionally jittered), then ``requests_per_event`` inference requests one after the
other, each paying ``latency_s / requests_per_event`` on the wire (half each way). Client ``i``
talks to server ``i mod M`` (an even load balancer). A server runs ``instances`` executions at
once; a free instance takes every queued request up to ``max_batch_requests`` (the dynamic
batcher with no queue delay, as ours when requests are already waiting) and is busy for
``exec_fixed_s + exec_per_request_s · n``. Clients start at random points of their first CPU
phase so they do not arrive in lockstep; the first event of each client is left out of the
averages.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SimulationConfig:
    clients: int
    servers: int
    cpu_s: float  # client CPU time per event: (1-p)·t_CPU
    exec_fixed_s: float  # per execution, whatever the batch
    exec_per_request_s: float  # per request merged into the execution
    latency_s: float = 0.0  # per event on the wire, both ways together
    requests_per_event: int = 1
    max_batch_requests: int = 1  # 1: no dynamic batching
    instances: int = 1  # concurrent executions per server
    events_per_client: int = 20
    cpu_jitter: float = 0.0  # CPU time varies uniformly by +- this fraction
    seed: int = 0

    def __post_init__(self) -> None:
        if self.clients < 1 or self.servers < 1 or self.instances < 1 or self.max_batch_requests < 1:
            raise ValueError(f"clients, servers, instances and max_batch_requests must be >= 1: {self}")
        if self.events_per_client < 2:
            msg = "events_per_client must be >= 2: the first event of each client is warm-up"
            raise ValueError(msg)


@dataclass(frozen=True)
class SimulationResult:
    config: SimulationConfig
    time_per_event_s: float  # mean over events after each client's first
    events_per_s: float  # all clients together, over the measured span
    server_utilization: float  # busy instance-time / available instance-time
    mean_batch_requests: float
    executions: int


_ARRIVE, _DONE, _CLIENT = 0, 1, 2


def simulate(config: SimulationConfig) -> SimulationResult:
    rng = np.random.default_rng(config.seed)
    hop_s = config.latency_s / config.requests_per_event / 2
    queues: list[deque[int]] = [deque() for _ in range(config.servers)]
    free = [config.instances] * config.servers
    busy_s = 0.0
    executions = 0
    merged = 0
    events: list[tuple[float, int, int, int, tuple[int, ...]]] = []
    sequence = 0

    def push(at: float, kind: int, index: int, batch: tuple[int, ...] = ()) -> None:
        nonlocal sequence
        sequence += 1
        heapq.heappush(events, (at, sequence, kind, index, batch))

    def cpu_time() -> float:
        if config.cpu_jitter <= 0:
            return config.cpu_s
        return config.cpu_s * (1 + config.cpu_jitter * (2 * rng.random() - 1))

    def start_executions(server: int, now: float) -> None:
        nonlocal busy_s, executions, merged
        while free[server] and queues[server]:
            take = min(config.max_batch_requests, len(queues[server]))
            batch = tuple(queues[server].popleft() for _ in range(take))
            duration = config.exec_fixed_s + config.exec_per_request_s * take
            free[server] -= 1
            busy_s += duration
            executions += 1
            merged += take
            push(now + duration, _DONE, server, batch)

    event_started = [0.0] * config.clients
    pending_requests = [0] * config.clients
    finished = [0] * config.clients
    measured_times: list[float] = []
    measure_from = float("inf")
    last_done = 0.0
    for client in range(config.clients):
        start = rng.random() * config.cpu_s
        push(start, _CLIENT, client)
    while events:
        now, _, kind, index, batch = heapq.heappop(events)
        if kind == _CLIENT:  # CPU phase over: send the event's first request
            pending_requests[index] = config.requests_per_event
            push(now + hop_s, _ARRIVE, index)
        elif kind == _ARRIVE:
            server = index % config.servers
            queues[server].append(index)
            start_executions(server, now)
        else:  # an execution finished: answers travel back, the instance takes the next batch
            free[index] += 1
            for client in batch:
                pending_requests[client] -= 1
                back = now + hop_s
                if pending_requests[client]:
                    push(back + hop_s, _ARRIVE, client)
                    continue
                finished[client] += 1
                if finished[client] == 1:
                    measure_from = min(measure_from, back)
                else:
                    measured_times.append(back - event_started[client])
                    last_done = max(last_done, back)
                event_started[client] = back
                if finished[client] < config.events_per_client:
                    push(back + cpu_time(), _CLIENT, client)
            start_executions(index, now)
    span = last_done - measure_from
    total_time = last_done
    return SimulationResult(
        config=config,
        time_per_event_s=float(np.mean(measured_times)),
        events_per_s=len(measured_times) / span if span > 0 else 0.0,
        server_utilization=busy_s / (total_time * config.servers * config.instances)
        if total_time > 0
        else 0.0,
        mean_batch_requests=merged / executions if executions else 0.0,
        executions=executions,
    )
