"""Triton's rate limiter: the resource pool, who runs next, and the load-time refusal in Triton's words."""

from __future__ import annotations

import threading

import pytest

from sonic.protocol.errors import InvalidArgumentError
from sonic.protocol.model_config import parse_config_text
from sonic.server.runtime.rate_limiter import (
    CPU_DEVICE,
    InstanceLimits,
    Key,
    RateLimiter,
    ResourceCount,
    ResourceNeed,
    Waiter,
    call_limited,
    choose_grants,
)

pytestmark = pytest.mark.unit


def _limits(*needs: tuple[str, int], priority: int = 0, device: int = CPU_DEVICE) -> InstanceLimits:
    return InstanceLimits(tuple(ResourceNeed(name, count) for name, count in needs), priority, device)


def _waiter(limits: InstanceLimits, turns: int, arrival: int) -> Waiter:
    return Waiter(limits, turns, arrival, threading.Event())


def test_default_pool_is_the_largest_need_per_resource_and_device() -> None:
    limiter = RateLimiter()
    limiter.register(object(), _limits(("R1", 4), ("R2", 4)))
    limiter.register(object(), _limits(("R2", 5), ("R3", 10)))
    limiter.register(object(), _limits(("R1", 1), ("R3", 7)))
    limiter.register(object(), _limits(("R1", 2), device=0))
    shared = InstanceLimits((ResourceNeed("G", 3, is_global=True),), 0, 1)
    limiter.register(object(), shared)
    assert dict(limiter.pool()) == {
        ("R1", CPU_DEVICE): 4,
        ("R2", CPU_DEVICE): 5,
        ("R3", CPU_DEVICE): 10,
        ("R1", 0): 2,
        ("G", None): 3,
    }


def test_explicit_pool_gives_unlisted_resources_none_as_triton() -> None:
    limiter = RateLimiter([ResourceCount("R1", 10)])
    limiter.register(object(), _limits(("R1", 10)))
    with pytest.raises(InvalidArgumentError) as info:
        limiter.register(object(), _limits(("R2", 2)))
    assert str(info.value) == (
        'Resource count for "R2" is limited to 0 which will prevent scheduling of one or more model '
        "instances, the minimum required count is 2"
    )
    with pytest.raises(InvalidArgumentError, match=r'"R1" is limited to 10 .* minimum required count is 11'):
        limiter.register(object(), _limits(("R1", 11)))


def test_explicit_device_counts_apply_to_that_gpu_only() -> None:
    limiter = RateLimiter([ResourceCount("R", 5, device=0), ResourceCount("R", 8, device=1)])
    limiter.register(object(), _limits(("R", 8), device=1))
    with pytest.raises(InvalidArgumentError, match="limited to 5"):
        limiter.register(object(), _limits(("R", 8), device=0))
    with pytest.raises(InvalidArgumentError, match="limited to 0"):  # a CPU instance: no count given for it
        limiter.register(object(), _limits(("R", 1)))


@pytest.mark.parametrize(
    ("text", "expected"),
    [("R1:10", ResourceCount("R1", 10)), ("R2:5:1", ResourceCount("R2", 5, 1))],
)
def test_resource_flag_parses(text: str, expected: ResourceCount) -> None:
    assert ResourceCount.parse(text) == expected


@pytest.mark.parametrize("text", ["R1", ":3", "R1:x", "R1:3:gpu", "R1:-1", "R1:1:2:3"])
def test_bad_resource_flag_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="--rate-limit-resource"):
        ResourceCount.parse(text)


def test_grants_go_by_priority_times_turns_then_arrival() -> None:
    pool: dict[Key, int] = {("R", CPU_DEVICE): 1}
    high = _waiter(_limits(("R", 1), priority=1), turns=3, arrival=0)  # 1 * 3 = 3
    low = _waiter(_limits(("R", 1), priority=2), turns=1, arrival=1)  # 2 * 1 = 2: goes first
    assert choose_grants([high, low], pool, {}) == [low]
    later = _waiter(_limits(("R", 1), priority=2), turns=1, arrival=2)
    assert choose_grants([later, low], pool, {}) == [low]  # same key: the one that came first


def test_priority_two_gets_half_the_turns_of_priority_one() -> None:
    pool: dict[Key, int] = {("R", CPU_DEVICE): 1}
    turns = {1: 0, 2: 0}
    for arrival in range(300):
        waiters = [_waiter(_limits(("R", 1), priority=p), turns[p], arrival * 2 + p) for p in (1, 2)]
        (granted,) = choose_grants(waiters, pool, {})
        turns[granted.limits.priority] += 1
    assert turns == {1: 200, 2: 100}


def test_a_waiter_that_does_not_fit_holds_its_resources_place_only() -> None:
    pool: dict[Key, int] = {("R", CPU_DEVICE): 4, ("S", CPU_DEVICE): 1}
    in_use: dict[Key, int] = {("R", CPU_DEVICE): 2}
    big = _waiter(_limits(("R", 4)), turns=0, arrival=0)
    small_same = _waiter(_limits(("R", 1)), turns=0, arrival=1)  # would fit, but big is ahead on R
    other = _waiter(_limits(("S", 1)), turns=0, arrival=2)  # needs nothing big waits for
    assert choose_grants([big, small_same, other], pool, in_use) == [other]
    assert in_use == {("R", CPU_DEVICE): 2, ("S", CPU_DEVICE): 1}


def test_acquire_blocks_until_the_holder_releases() -> None:
    limiter = RateLimiter()
    first, second = object(), object()
    limiter.register(first, _limits(("R", 1)))
    limiter.register(second, _limits(("R", 1)))
    limiter.acquire(first)
    order: list[str] = []
    waiter = threading.Thread(target=lambda: order.append(call_limited(limiter, second, str, "second")))
    waiter.start()
    order.append("first done")  # before release: the second cannot have run yet
    limiter.release(first)
    waiter.join(timeout=30)
    assert order == ["first done", "second"]
    limiter.acquire(first)  # the second gave its copy back
    limiter.release(first)


def test_limits_come_from_the_instance_group() -> None:
    config = parse_config_text(
        'name: "m" instance_group [ { kind: KIND_CPU rate_limiter { resources [ { name: "R" count: 2 }, '
        '{ name: "G" global: true count: 1 } ] priority: 3 } } ]',
        "test",
    )
    limits = InstanceLimits.from_group(config.instance_group[0], CPU_DEVICE)
    assert limits == InstanceLimits(
        (ResourceNeed("R", 2), ResourceNeed("G", 1, is_global=True)), priority=3, device=CPU_DEVICE
    )
