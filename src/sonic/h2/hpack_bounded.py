"""hpack's decoder and dynamic table, subclassed: a cap on table-size updates, and a count of insertions.

Kept apart from :mod:`sonic.h2.headers` because that module is compiled (mypyc, :mod:`sonic.compiled`) and
these classes derive from a third-party library's classes: a wheel's isolated build has no hpack to type
them against, and a compiled class whose base mypyc cannot see (``Any``) is built as a native class laid
out wrongly (a clean-clone CI run crashed in ``HeaderTable()``). Interpreted, they are hpack's own classes
with two overrides; neither is on the per-request path (decoded blocks are memoised).
"""

from __future__ import annotations

from typing import Any

import hpack
from hpack.table import HeaderTable


class CountingTable(HeaderTable):
    """HPACK dynamic table that counts insertions, so unchanged-table decodes can be remembered."""

    insertions = 0

    def add(self, name: bytes, value: bytes) -> Any:
        self.insertions += 1
        return super().add(name, value)


class BoundedDecoder(hpack.Decoder):
    """hpack's decoder with a cap on dynamic-table-size updates per block (each one resizes the table)."""

    def __init__(self, max_header_list_size: int, max_table_size_updates: int) -> None:
        super().__init__(max_header_list_size=max_header_list_size)
        self.max_table_size_updates = max_table_size_updates
        self.table_size_updates = 0

    def _update_encoding_context(self, data: bytes | memoryview) -> int:
        self.table_size_updates += 1
        if self.table_size_updates > self.max_table_size_updates:
            msg = f"more than {self.max_table_size_updates} table size updates in one header block"
            raise hpack.HPACKDecodingError(msg)
        return int(super()._update_encoding_context(data))
