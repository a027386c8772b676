"""Triton's ``--grpc-header-forward-pattern`` / ``--http-header-forward-pattern``: headers as request parameters.

As Triton 2.51 (its gRPC ``ForwardHeadersAsParameters`` and HTTP ``ForwardHeaders``): every header of an
inference request (``ModelInfer``, each request of a ``ModelStreamInfer`` stream with the headers that
opened it, HTTP ``/infer``) whose name matches the pattern anywhere (a search, not a full match), case
ignored unless the pattern says ``(?-i)``, is added to the request's parameters as a string: a Python
model reads it with ``request.parameters()``, an ensemble hands it to its steps. HTTP names are as the
client spelled them (``My_Header``); gRPC names are lower case (HTTP/2), and gRPC's own headers
(``content-type``, ``te``, ``grpc-*``, pseudo-headers) are never forwarded, as grpc's server library
hides them from Triton (``user-agent`` it shows, and is forwarded).

A header with the name of a parameter the client sent replaces it: Triton adds a second parameter of
the same name, and ``json.loads(request.parameters())`` keeps the last one, the header's. Headers named
as one of Triton's own request parameters (``priority``, ``timeout``, ``sequence_id``, ...) are not
forwarded (docs/triton-differences.md, ``header-forward-reserved``): sonic's parameters are one mapping,
where such a string would take the place of the value the scheduler reads.

The pattern is Triton's RE2 syntax read by Python's ``re``; a pattern ``re`` cannot compile (RE2-only
syntax such as ``\\pL``) is refused at start, where Triton would log it and forward nothing.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass

from sonic.protocol.types import REQUEST_PARAMETERS

Forwarded = tuple[tuple[str, str], ...]  # (name, value) of each forwarded header, in arrival order

_LEADING_FLAGS = re.compile(r"\(\?([a-zA-Z]*(?:-[a-zA-Z]+)?)\)")
_GRPC_OWN = ("content-type", "te")


@dataclass(frozen=True)
class HeaderForward:
    """One front end's pattern (None: forward nothing, the default)."""

    pattern: re.Pattern[str] | None = None

    @classmethod
    def compile(cls, pattern: str, flag: str) -> HeaderForward:
        """The pattern given to ``flag``; "" forwards nothing. Raises ValueError for one ``re`` cannot read."""
        if not pattern:
            return cls()
        # Triton compiles "(?i)" + pattern with RE2, where a leading "(?-i)" turns case back on for the
        # rest; Python takes flags inside a pattern only scoped to a group, so the leading flags scope
        # the rest of it.
        leading = _LEADING_FLAGS.match(pattern)
        text = f"(?{leading.group(1)}:{pattern[leading.end() :]})" if leading else pattern
        try:
            return cls(re.compile(text, re.IGNORECASE))
        except re.error as exc:
            raise ValueError(
                f"{flag}={pattern}: not a regular expression sonic can read ({exc}); sonic uses Python's re "
                "for Triton's RE2 patterns"
            ) from None

    @property
    def enabled(self) -> bool:
        return self.pattern is not None

    def http(self, raw_headers: Iterable[tuple[bytes, bytes]]) -> Forwarded:
        """The HTTP headers to forward, names as the client spelled them."""
        pattern = self.pattern
        if pattern is None:
            return ()
        return tuple(
            (name, value.decode("utf-8", "replace"))
            for raw_name, value in raw_headers
            if pattern.search(name := raw_name.decode("latin-1"))
        )

    def grpc(self, metadata: Iterable[tuple[str, str | bytes]]) -> Forwarded:
        """The gRPC headers to forward: ``metadata`` as the front end has it (a ``-bin`` value base64 text
        as on the wire, or its bytes as grpcio gives them), by name as Triton's (grpc's metadata is a
        multimap: sorted by name, a repeated name in arrival order)."""
        pattern = self.pattern
        if pattern is None:
            return ()
        chosen = [
            (name, _grpc_value(name, value))
            for name, value in metadata
            if not name.startswith((":", "grpc-")) and name not in _GRPC_OWN and pattern.search(name)
        ]
        return tuple(sorted(chosen, key=lambda header: header[0]))


def _grpc_value(name: str, value: str | bytes) -> str:
    """A metadata value as text; a binary (``-bin``) one decoded and cut at its first NUL, as Triton's C
    string of it is."""
    if not name.endswith("-bin"):
        return value if isinstance(value, str) else value.decode("latin-1")
    if isinstance(value, str):
        try:
            value = base64.b64decode(value + "=" * (-len(value) % 4))
        except (binascii.Error, ValueError):
            return ""
    return value.split(b"\0", 1)[0].decode("utf-8", "replace")


def forward(parameters: MutableMapping[str, object], forwarded: Forwarded) -> None:
    """Add the forwarded headers to a request's parameters (a later one of a name replaces an earlier)."""
    for name, value in forwarded:
        if name not in REQUEST_PARAMETERS:
            parameters[name] = value


NO_FORWARD = HeaderForward()  # the default: no header becomes a parameter
