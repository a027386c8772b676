"""``--grpc-header-forward-pattern`` / ``--http-header-forward-pattern`` (``sonic.server.header_forward``)."""

from __future__ import annotations

import base64

import pytest

from sonic.server.config import GrpcConfig
from sonic.server.header_forward import NO_FORWARD, HeaderForward, forward

pytestmark = pytest.mark.unit


def test_names_match_anywhere_case_ignored() -> None:
    pattern = HeaderForward.compile("MY_HEADER.*", "--http-header-forward-pattern")
    raw = [(b"My_Header_1", b"a"), (b"x-my_header", b"b"), (b"Host", b"h"), (b"my-header", b"c")]
    # A search, as RE2's PartialMatch: "x-my_header" matches too; names keep the client's spelling.
    assert pattern.http(raw) == (("My_Header_1", "a"), ("x-my_header", "b"))


def test_a_leading_minus_i_turns_case_back_on() -> None:
    pattern = HeaderForward.compile("(?-i)MY_HEADER.*|my_other", "--grpc-header-forward-pattern")
    assert pattern.grpc([("my_header", "a"), ("my_other", "b")]) == (("my_other", "b"),)
    assert pattern.http([(b"MY_HEADER", b"c")]) == (("MY_HEADER", "c"),)


def test_grpc_own_headers_are_never_forwarded_and_names_sort() -> None:
    pattern = HeaderForward.compile(".*", "--grpc-header-forward-pattern")
    metadata = [
        (":path", "/x"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        ("grpc-timeout", "1S"),
        ("user-agent", "me"),
        ("b", "2"),
        ("a", "1"),
        ("b", "3"),
    ]
    assert pattern.grpc(metadata) == (("a", "1"), ("b", "2"), ("b", "3"), ("user-agent", "me"))


def test_binary_values_are_decoded_and_cut_at_nul() -> None:
    pattern = HeaderForward.compile("bin", "--grpc-header-forward-pattern")
    wire = base64.b64encode(b"ab\0cd").decode().rstrip("=")  # unpadded, as gRPC sends it
    assert pattern.grpc([("x-bin", wire), ("y-bin", b"raw\0rest")]) == (("x-bin", "ab"), ("y-bin", "raw"))
    assert pattern.grpc([("z-bin", "!!!")]) == (("z-bin", ""),)


def test_no_pattern_forwards_nothing() -> None:
    assert not NO_FORWARD.enabled
    assert HeaderForward.compile("", "--http-header-forward-pattern") == NO_FORWARD
    assert NO_FORWARD.http([(b"a", b"b")]) == ()
    assert NO_FORWARD.grpc([("a", "b")]) == ()


def test_a_pattern_python_cannot_read_fails_the_start() -> None:
    with pytest.raises(ValueError, match=r"--grpc-header-forward-pattern=\\pL: not a regular expression"):
        GrpcConfig(header_forward_pattern=r"\pL")


def test_headers_replace_client_parameters_but_not_tritons_own() -> None:
    parameters: dict[str, object] = {"my_header": 5, "priority": 2, "other": True}
    forward(parameters, (("my_header", "h1"), ("priority", "9"), ("timeout", "1"), ("my_header", "h2")))
    assert parameters == {"my_header": "h2", "priority": 2, "other": True}
