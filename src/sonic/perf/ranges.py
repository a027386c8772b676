"""The ``START:END:STEP`` ranges of ``sonic perf``, ``sonic analyze`` and ``sonic scale`` options."""

from __future__ import annotations

from sonic.perf.transport import PerfError


def _range_values(text: str) -> list[float] | None:
    parts = text.split(":")
    try:
        numbers = [float(p) for p in parts[:2]]
        step = parts[2] if len(parts) == 3 else "1"
        factor = float(step[1:]) if step.startswith("x") else None
        increment = None if factor is not None else float(step)
    except ValueError:
        return None
    if len(parts) == 1:
        return numbers
    if (
        len(parts) > 3
        or numbers[0] <= 0
        or numbers[1] < numbers[0]
        or (factor is not None and factor <= 1)
        or (increment is not None and increment <= 0)
    ):
        return None
    values = []
    value = numbers[0]
    while value <= numbers[1] * (1 + 1e-9):
        values.append(value)
        value = value * factor if factor is not None else value + (increment or 0.0)
    return values


def parse_range(text: str) -> list[float]:
    """``START:END:STEP`` (``xK`` multiplies, a number adds), ``START:END`` (step 1) or one value."""
    values = _range_values(text)
    if values is None or any(v <= 0 for v in values):
        raise PerfError(
            f"range {text!r}: expected START:END:STEP with STEP a number or xFACTOR (e.g. 1:64:x2), "
            "START:END or a single value, all positive"
        )
    return values
