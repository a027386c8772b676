"""One event: its index and the products modules put into it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class Event:
    """Products by name; each is written once (a module never overwrites another's product)."""

    def __init__(self, index: int, products: Mapping[str, Any] | None = None) -> None:
        self.index = index
        self._products: dict[str, Any] = dict(products or {})

    def put(self, name: str, value: Any) -> None:
        if name in self._products:
            raise KeyError(f"event {self.index}: product '{name}' is already set")
        self._products[name] = value

    def get(self, name: str) -> Any:
        try:
            return self._products[name]
        except KeyError:
            raise KeyError(
                f"event {self.index}: no product '{name}'; present: {sorted(self._products)}"
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._products

    @property
    def names(self) -> list[str]:
        return sorted(self._products)
