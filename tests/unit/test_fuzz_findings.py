"""Crashes the fuzz tests (tests/fuzz) found, each as the minimal input that caused it, fixed.

Each test names the decoder, what it did before the fix, and what it answers now.
"""

from __future__ import annotations

from sonic.protocol.grpc_call import trailers_status


def test_grpc_message_that_is_not_ascii_is_read_not_raised() -> None:
    """A client read a server's ``grpc-message`` of raw bytes with UnicodeDecodeError (the call ended with
    the decode error instead of the server's status); the gRPC spec asks decoders never to fail on it."""
    assert trailers_status([(b"grpc-status", b"0"), (b"grpc-message", b"\x80")]) == ("OK", "\ufffd")
    raw_utf8 = "d\u00e9j\u00e0 vu".encode()
    assert trailers_status([(b"grpc-status", b"3"), (b"grpc-message", raw_utf8)]) == (
        "INVALID_ARGUMENT",
        "d\u00e9j\u00e0 vu",
    )
