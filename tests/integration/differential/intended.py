"""The intended differences between sonic and real Triton 2.51: the one table the differential tests read.

``docs/triton-differences.md`` lists the same rows (id, what differs, why) in the same order; a unit
test checks that the doc and this table agree. A difference matched by no row fails the harness.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.integration.differential.calls import Call, GrpcCall, HttpCall, Outcome
from tests.integration.differential.strategies import AFTER_CONTROL

CLIENT_ERRORS = {"INVALID_ARGUMENT", "NOT_FOUND", "400", "404"}


@dataclass(frozen=True)
class Intended:
    id: str
    what: str  # what differs (the doc's second column)
    why: str  # the reason (the doc's third column)
    # (call, Triton's outcome, sonic's outcome) -> whether this row explains the difference
    matches: Callable[[Call, Outcome, Outcome], bool]


def _core(message: str) -> str:
    """Triton's message without its ``[request id: ...]`` prefix and its trailing ``. `` or ``. NOTE: ...``."""
    message = re.sub(r"^\[request id: [^\]]*\] ", "", message)
    return re.sub(r"\. (NOTE: .*)?$", "", message, flags=re.DOTALL)


def _context(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    return triton.code == sonic.code and bool(triton.message) and _core(triton.message) in sonic.message


GOT_INPUTS = re.compile(r"Got input\(s\) \[([^\]]*)\]")


BATCH_MISMATCH = re.compile(r"input '[^']*' batch size does not match other inputs")


def _sorted_inputs(message: str) -> str:
    """Triton's input lists sorted, and the input its batch-size mismatch names left out."""
    message = GOT_INPUTS.sub(
        lambda m: "Got input(s) [" + ",".join(sorted(m.group(1).split(","))) + "]", message
    )
    return BATCH_MISMATCH.sub("input batch size does not match other inputs", message)


def _input_list(call: Call, triton: Outcome, sonic: Outcome) -> bool:
    listed = (
        GOT_INPUTS.search(triton.message) is not None or BATCH_MISMATCH.search(triton.message) is not None
    )
    return listed and _context(
        call,
        Outcome(triton.code, _sorted_inputs(triton.message)),
        Outcome(sonic.code, _sorted_inputs(sonic.message)),
    )


def _order(call: Call, triton: Outcome, sonic: Outcome) -> bool:
    return call.faults >= 2 and triton.code == sonic.code and triton.code in CLIENT_ERRORS


def _lookup(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    unknown = triton.code in {"NOT_FOUND", "404"} and triton.message.startswith("Request for unknown model")
    # sonic refused the message's contents (not the model: that would be the status, not the order)
    decoded = "Request for unknown model" not in sonic.message
    return unknown and decoded and sonic.code in {"INVALID_ARGUMENT", "400"}


# The client faults Triton answers INTERNAL that sonic answers NOT_FOUND (what is named is not there);
# every other is INVALID_ARGUMENT.
ABSENT = re.compile(r"no shared memory object with key|no model folder|Unable to find shared memory region")


def _internal(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    expected = {"NOT_FOUND", "404"} if ABSENT.search(sonic.message) else {"INVALID_ARGUMENT", "400"}
    return triton.code in {"INTERNAL", "500"} and sonic.code in expected


WORDING = (
    r"^Unable to parse request$",  # gRPC: unparseable protobuf
    r"^inference header size should be in range",  # HTTP: Inference-Header-Content-Length
    r"^failed to register shared memory region '': invalid args$",
    r"^Not Found$",  # HTTP: no such route
    r"^Method Not Allowed$",  # HTTP: a route under a method it does not take
)


def _wording(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    return triton.code == sonic.code and any(re.search(p, triton.message) for p in WORDING)


def _fp16_json(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    refused = ("sending FP16 data via JSON is not supported", "receiving FP16 data via JSON is not supported")
    return triton.message.startswith(refused) and sonic.code == "200"


def _log_setting_value(call: Call, triton: Outcome, sonic: Outcome) -> bool:
    if not (isinstance(call, HttpCall) and call.path == "/v2/logging" and sonic.code == "400"):
        return False
    unknown_format = triton.code == "503" and triton.message.startswith("invalid argument for --log_format")
    wrapped_level = triton.code == "200" and "expect int32 for 'log_verbose_level', got int" in sonic.message
    return unknown_format or wrapped_level


def _traffic_log_key(call: Call, triton: Outcome, sonic: Outcome) -> bool:
    # Both servers of the harness run without --traffic-log: sonic refuses the key, Triton ignores it.
    named = "traffic_log" in (call.what or "")
    return named and triton.code in {"OK", "200"} and sonic.code in {"INVALID_ARGUMENT", "400"}


def _trace_setting_value(call: Call, triton: Outcome, sonic: Outcome) -> bool:
    unknown_level = triton.code in {"OK", "200"} and sonic.message.startswith("unknown trace level")
    if isinstance(call, GrpcCall):
        return call.method == "TraceSetting" and sonic.code == "INVALID_ARGUMENT" and unknown_level
    if not (call.path.endswith("/trace/setting") and sonic.code == "400"):
        return False
    return unknown_level or (triton.code == "500" and triton.message == sonic.message)


def _trace_files(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    return False  # the harness compares answers, not trace files: tests/integration/test_trace.py reads them


def _otlp_export(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    return False  # the harness compares answers, not exports: tests/integration/test_trace_otlp.py reads them


def _json_not_utf8(call: Call, triton: Outcome, sonic: Outcome) -> bool:
    refused = "cannot be parsed" in sonic.message and "'utf-8' codec can't decode" in sonic.message
    return isinstance(call, HttpCall) and triton.code in {"200", "400"} and sonic.code == "400" and refused


def _both_framings(call: Call, _: Outcome, sonic: Outcome) -> bool:
    # Triton serves the request (or answers the fault of its body); sonic refuses the framing first.
    framed_twice = (
        isinstance(call, HttpCall) and {"Transfer-Encoding", "Content-Length"} <= call.headers.keys()
    )
    said = "both 'Transfer-Encoding: chunked' and 'Content-Length'" in sonic.message
    return framed_twice and sonic.code == "400" and said


def _classified_bytes(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    refused = "class result not available for output due to unsupported type 'BYTES'" in sonic.message
    return refused and triton.code not in {"OK", "200"}


def _never_generated(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    # The harness starts both servers without header forwarding: its cases never meet this row, which
    # tests/integration/backends/test_header_forward_parity.py checks instead.
    return False


def _string_sequence_id(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    return sonic.code in CLIENT_ERRORS and "is a string, but control input" in sonic.message


def _without_empty_bytes(answer: Any) -> Any:
    """An answer with the bytes of empty BYTES outputs blanked (gRPC raw contents, HTTP binary parts)."""
    if isinstance(answer, dict) and "raw_output_contents" not in answer and "outputs" in answer:
        outputs = [
            {**o, "parameters": {**o["parameters"], "binary_data_size": 0}, "binary": ""}
            if o.get("datatype") == "BYTES" and 0 in o.get("shape", []) and "parameters" in o
            else o
            for o in answer["outputs"]
        ]
        return {**answer, "outputs": outputs}
    if not isinstance(answer, dict) or "raw_output_contents" not in answer:
        return answer
    raw = list(answer["raw_output_contents"])
    for index, output in enumerate(answer.get("outputs", [])):
        if output.get("datatype") == "BYTES" and "0" in output.get("shape", []) and index < len(raw):
            raw[index] = ""
    return {**answer, "raw_output_contents": raw}


def _empty_bytes(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    same = _without_empty_bytes(triton.answer) == _without_empty_bytes(sonic.answer)
    return triton.code == sonic.code and triton.code in {"OK", "200"} and same


def _unloaded(entries: Any) -> Any:
    if not isinstance(entries, list):
        return entries
    return [
        {**e, "state": "UNAVAILABLE", "reason": "unloaded"} if e.get("state") == "UNLOADING" else e
        for e in entries
    ]


def _unloading(call: Call, triton: Outcome, sonic: Outcome) -> bool:
    if call.what == AFTER_CONTROL:  # Triton is not ready while a model is UNLOADING
        return (triton.code, triton.message, triton.answer, sonic.code, sonic.answer) in [
            ("OK", "", {}, "OK", {"ready": True}),
            ("400", "", None, "200", None),
        ]
    if (triton.code, triton.message) != (sonic.code, sonic.message):
        return False  # an error answer differs in its message: not this row's difference
    if isinstance(triton.answer, dict) and "models" in triton.answer:  # gRPC RepositoryIndex
        return bool({"models": _unloaded(triton.answer["models"])} == sonic.answer)
    return bool(_unloaded(triton.answer) == sonic.answer)


def _server_metadata(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    keys = {"name", "version", "extensions"}
    both = (triton.answer, sonic.answer)
    if not all(isinstance(a, dict) and set(a) == keys for a in both):
        return False
    return triton.code == sonic.code and triton.answer["name"] == sonic.answer["name"]


def _empty_name(call: Call, triton: Outcome, sonic: Outcome) -> bool:
    route = isinstance(call, HttpCall) and "/models//" in call.path
    return route and triton.code == "404" and sonic.code in {"400", "200", "503"}


def _unaligned(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    refused = (
        triton.code in {"INVALID_ARGUMENT", "400"} and "unable to process address space" in triton.message
    )
    return refused and sonic.code in {"OK", "200"}


def _extra_raw(call: Call, triton: Outcome, sonic: Outcome) -> bool:
    extra = "raw_input_contents has" in sonic.message and "entries for" in sonic.message
    return extra and triton.code == "OK" and sonic.code == "INVALID_ARGUMENT"


EMPTY_NAME = "shared memory region name must not be empty"


def _without_empty_region(answer: Any) -> Any:
    if isinstance(answer, dict) and "regions" in answer:  # gRPC status
        regions = {k: v for k, v in answer["regions"].items() if k != ""}
        return {"regions": regions} if regions else {}
    if isinstance(answer, list):  # HTTP status
        return [r for r in answer if not (isinstance(r, dict) and r.get("name") == "")]
    return answer


def _shm_empty_name(call: Call, triton: Outcome, sonic: Outcome) -> bool:
    if sonic.message == EMPTY_NAME:  # sonic refuses the name where Triton registers it
        # Triton registers it (or has, or refuses the call for another fault: offset, size)
        registered = triton.code == "OK" or "already in manager" in triton.message
        registered |= triton.message.startswith("failed to register shared memory region '': ")
        return isinstance(call, GrpcCall) and registered and sonic.code == "INVALID_ARGUMENT"
    # What follows differs by the region Triton holds under the empty name alone.
    same = (triton.code, triton.message) == (sonic.code, sonic.message)
    return same and _without_empty_region(triton.answer) == sonic.answer


def _not_a_request(_: Call, __: Outcome, ___: Outcome) -> bool:
    """A difference at start-up, not in an answer: tests/integration/test_serve_start_up.py keeps it."""
    return False


def _tritons_stub_dies(_: Call, __: Outcome, ___: Outcome) -> bool:
    """Triton's answer holds nothing to compare (its Python stub dies): test_reach_sonic.py keeps sonic's."""
    return False


def _same_code(triton: Outcome, sonic: Outcome, theirs: str, ours: str) -> bool:
    return (
        triton.code == sonic.code and re.search(theirs, triton.message) is not None and ours in sonic.message
    )


def _unexpected_input(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    return _same_code(triton, sonic, r"but missing required input\(s\) \]", "unexpected inference input")


def _negative_dimension(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    theirs = r"input byte size mismatch .*Expected -\d|expected 42949672\d\d string elements"
    ours = re.search(
        r"has a negative dimension|batch-size must be in 1\.\.\d+ for '[^']*', got -", sonic.message
    )
    return triton.code == sonic.code and re.search(theirs, triton.message) is not None and ours is not None


def _bytes_framing(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    theirs = r"incomplete string|expected \d+ string elements|unexpected number of string elements"
    return _same_code(triton, sonic, theirs, "malformed BYTES data")


def _http_parameter_on_grpc(call: Call, triton: Outcome, sonic: Outcome) -> bool:
    refused = "request parameter 'binary_data_output' must be" in sonic.message
    return isinstance(call, GrpcCall) and triton.code == "OK" and sonic.code == "INVALID_ARGUMENT" and refused


def _required_with_optional(call: Call, triton: Outcome, sonic: Outcome) -> bool:
    refused = "but missing required input(s)" in sonic.message and sonic.code in CLIENT_ERRORS
    return triton.code in {"OK", "200"} and refused


def _zero_batch(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    theirs = r"input byte size mismatch|expected \d+ string elements"
    return _same_code(triton, sonic, theirs, "batch-size must be in 1..") and sonic.message.endswith("got 0")


def _input_parameters(call: Call, triton: Outcome, sonic: Outcome) -> bool:
    refused = re.search(r"(input|output) '[^']*': 'parameters' must be an object", sonic.message) is not None
    return isinstance(call, HttpCall) and sonic.code == "400" and refused and triton.code in {"200", "400"}


def _missing_outputs(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    answered = triton.code in {"OK", "200"} or triton.message.startswith("sending FP16 data via JSON")
    return answered and sonic.code in {"INTERNAL", "500"} and "did not produce output(s)" in sonic.message


def _model_exception(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    theirs = triton.message.startswith("Failed to process the request(s) for model ")
    # A decoupled model's stream: Triton's words without the traceback that follows them.
    untraced = triton.message.split("\n\nAt:\n", 1)[0] == sonic.message
    return theirs and triton.code == sonic.code and (sonic.message.startswith("model '") or untraced)


def _bytes_output_not_utf8(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    ours = "BYTES output is not UTF-8 text; request it with binary_data: true" in sonic.message
    return triton.code == "200" and sonic.code == "400" and ours


def _model_output_checked(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    ours = re.search(
        r"unexpected output '[^']*', the config declares|has numpy dtype .* but the config declares|is BYTES in the config, but the model gave",
        sonic.message,
    )
    return triton.code in {"OK", "200"} and sonic.code in {"INTERNAL", "500"} and ours is not None


def _by_name(answer: Any) -> Any:
    """A gRPC answer with its outputs (and their raw contents) sorted by name."""
    if not isinstance(answer, dict) or "outputs" not in answer:
        return answer
    raw = answer.get("raw_output_contents")
    pairs = sorted(
        zip(answer["outputs"], raw or [None] * len(answer["outputs"]), strict=False),
        key=lambda p: p[0].get("name", ""),
    )
    ordered = {**answer, "outputs": [p[0] for p in pairs]}
    if raw is not None:
        ordered["raw_output_contents"] = [p[1] for p in pairs]
    return ordered


def _output_order(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    same = triton.answer != sonic.answer and _by_name(triton.answer) == _by_name(sonic.answer)
    return triton.code == sonic.code and same


# Triton's traceback of a Python model's exception (``At:`` and the frames), or where sonic says it failed.
TRACEBACK = re.compile(r"\n\nAt:\n.*?\n(?=;)", re.DOTALL)


def _load_failure_text(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    """A model's failure to load: the load call's message without the traceback, or the index's reasons."""
    if triton.code != sonic.code:
        return False
    if triton.message.startswith("load failed for model "):  # Triton's words first
        return TRACEBACK.sub("", sonic.message).startswith(TRACEBACK.sub("", triton.message).rstrip())
    if triton.message != sonic.message or not isinstance(triton.answer, dict | list):
        return False
    return bool(_without_reasons(triton.answer) == _without_reasons(sonic.answer))


POLL_FAILED = re.compile(r"^failed to load '[^']*', failed to poll from model repository$")


def _poll_failure(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    """Triton's words, then what is wrong; the status of the client's fault."""
    theirs = POLL_FAILED.match(triton.message) is not None and triton.code in {"INTERNAL", "500"}
    ours = sonic.code in {"INVALID_ARGUMENT", "400"} and sonic.message.startswith(triton.message + ": ")
    return theirs and ours


def _checksum_agent(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    """Triton here has no checksum agent; sonic's verifies (loads, or refuses a mismatch in its words)."""
    theirs = POLL_FAILED.match(triton.message) is not None and triton.code in {"INTERNAL", "500"}
    verified = sonic.code in {"OK", "200"} or (
        sonic.code in {"INVALID_ARGUMENT", "400"} and "Mismatched MD5 hash for file " in sonic.message
    )
    return theirs and verified


REFUSED_CONFIG = re.compile(
    r"(input|output) '[^']*' is declared twice|dynamic_batching needs max_batch_size > 0|"
    r"instance_group count must be >= 0|datatype \d+ has no KServe v2 equivalent"
)


def _config_refused(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    refused = sonic.code in {"INVALID_ARGUMENT", "400"} and REFUSED_CONFIG.search(sonic.message) is not None
    return triton.code in {"OK", "200"} and refused


def _unload_parameters(call: Call, triton: Outcome, sonic: Outcome) -> bool:
    unload = (
        call.method == "RepositoryModelUnload"
        if isinstance(call, GrpcCall)
        else call.path.endswith("/unload")
    )
    ours = re.search(
        r"unknown parameter '[^']*' \(known: 'unload_dependents'\)|'unload_dependents' parameter",
        sonic.message,
    )
    return (
        unload
        and triton.code in {"OK", "200"}
        and sonic.code in {"INVALID_ARGUMENT", "400"}
        and ours is not None
    )


def _header_length(call: Call, triton: Outcome, sonic: Outcome) -> bool:
    given = call.headers.get("Inference-Header-Content-Length", "") if isinstance(call, HttpCall) else ""
    refused = sonic.code == "400" and "Inference-Header-Content-Length must be an integer" in sonic.message
    return refused and not given.isdigit() and triton.code in {"200", "400"}


def _cuda_register(call: Call, triton: Outcome, sonic: Outcome) -> bool:
    register = (
        call.method == "CudaSharedMemoryRegister"
        if isinstance(call, GrpcCall)
        else call.path.startswith("/v2/cudasharedmemory/region/") and call.path.endswith("/register")
    )
    refused = triton.code in {"INVALID_ARGUMENT", "400"}
    return register and refused and sonic.code in {"UNIMPLEMENTED", "501"}


def _without_reasons(answer: Any) -> Any:
    entries = answer.get("models", []) if isinstance(answer, dict) else answer
    if not isinstance(entries, list):
        return answer
    return [{k: v for k, v in e.items() if k != "reason"} if isinstance(e, dict) else e for e in entries]


def _json_integer_range(_: Call, triton: Outcome, sonic: Outcome) -> bool:
    refused = sonic.code in {"400", "INVALID_ARGUMENT"} and re.search(
        r"value -?\d+ is out of range for [A-Z0-9]+", sonic.message
    )
    return triton.code in {"200", "OK"} and refused is not None


def _body_not_object(call: Call, triton: Outcome, sonic: Outcome) -> bool:
    action = isinstance(call, HttpCall) and call.path.startswith("/v2/repository/")
    refused = (sonic.code, sonic.message) == ("400", "request JSON must be an object")
    return action and triton.code == "200" and refused


INTENDED: tuple[Intended, ...] = (
    Intended(
        "error-context",
        "Validation errors: sonic's message starts with where the fault is (model, version, input) "
        "where Triton's starts with `[request id: <id_unknown>]`; Triton's own text follows, without "
        "the trailing `. NOTE: ...` hint on batch dimensions; where Triton's text names no values, "
        "sonic adds them after it (a model's outputs, a shared-memory object's size).",
        "House rule: every error names what was given, what was expected and which model and input. "
        "The status code and Triton's wording are kept, so clients that match on either still work.",
        _context,
    ),
    Intended(
        "validation-order",
        "A request with two or more faults: both refuse it with the same status, but may name a "
        "different fault (Triton checks the requested outputs, then the input count, then inputs in "
        "name order; sonic checks inputs in request order, then the count, then outputs).",
        "Either answer is right and the client has to fix every fault anyway; matching Triton's order "
        "exactly would mean re-sorting inputs on the hot path.",
        _order,
    ),
    Intended(
        "input-list-order",
        "Too few inputs: Triton's `Got input(s) [...]` lists the inputs it got in the order of its hash "
        "map; sonic lists them in the order of the request. Inputs of different batch sizes: Triton names "
        "one whose batch size differs from the first it looked at, in that order; sonic the first that "
        "differs from the request's first input. The rest of the message is Triton's.",
        "Triton's order depends on its standard library's string hash, not on anything the client sent; "
        "the request's order is the one the client can compare with.",
        _input_list,
    ),
    Intended(
        "decode-before-lookup",
        "An inference request that cannot be decoded (raw/typed contents, byte counts, JSON data) and "
        "also names an unknown model or version: Triton answers NOT_FOUND/404 (it looks the model up "
        "first), sonic INVALID_ARGUMENT/400 (it decodes the message first).",
        "sonic's front ends decode a message completely before any server state is read, so a "
        "malformed message costs no model lookup; both answers are client errors.",
        _lookup,
    ),
    Intended(
        "poll-failure-status",
        "A load Triton refuses while it polls the repository (a `config.pbtxt` that does not parse or "
        "names another model, `max_batch_size` below 0, a preferred batch size over `max_batch_size`, a "
        "sequence-batcher control without its values or data type, an unknown platform): Triton answers "
        "INTERNAL/500 `failed to load '<m>', failed to poll from model repository`; sonic INVALID_ARGUMENT/"
        "400, the same words, then what is wrong.",
        "The configuration is the client's (the repository's author's) to fix, and a retry elsewhere "
        "gives the same answer; Triton's words alone do not say which line is wrong.",
        _poll_failure,
    ),
    Intended(
        "client-fault-not-internal",
        "Triton answers INTERNAL/500 for a client's fault: unparseable protobuf or JSON, JSON `shape` "
        "with a negative number, JSON `data` that does not fill `shape`, JSON `data` elements of the "
        "wrong JSON type (`null` or a string for a number, `1` for BOOL, `1.5` for an integer), a "
        "shared-memory key that does not exist or is empty, a load of a model that is not in the repository, a log setting of the "
        "wrong JSON type, an HTTP output `classification` that is not an unsigned integer. sonic answers INVALID_ARGUMENT/400 or NOT_FOUND/404 with what was wrong.",
        "A 5xx tells clients and load balancers (Envoy outlier detection, the sonic client's "
        "failover) that the server is at fault and invites a retry elsewhere; these are the client's "
        "faults and a retry gives the same answer.",
        _internal,
    ),
    Intended(
        "wording",
        "Same status, other words, where Triton's message names no input: unparseable protobuf, "
        "`Inference-Header-Content-Length` past the body, registering shared memory under an empty "
        "name, an HTTP route that does not exist (`Not Found`) or a method the route does not take "
        "(`Method Not Allowed`; both answer 405, sonic with an `Allow` header).",
        "sonic's message says what was given and what was expected (byte counts, the parser's "
        "position, the route, the methods to use).",
        _wording,
    ),
    Intended(
        "fp16-json",
        "FP16 data as JSON: Triton refuses an FP16 input given as JSON numbers (400 `receiving FP16 data "
        "via JSON is not supported`) and, for an FP16 output asked for as JSON, runs the model, then "
        "answers 400 `sending FP16 data via JSON is not supported`; sonic takes the input (each number "
        "rounded to FP16, as FP32 inputs are to FP32) and answers the output's values as JSON numbers.",
        "Every FP16 value is exact as a JSON number, and JSON is what curl users and quick checks send; "
        "refusing after the model ran wastes the inference. Clients that work with Triton work unchanged.",
        _fp16_json,
    ),
    Intended(
        "string-sequence-id",
        "A string `sequence_id` for a model whose CORRID control is a number (TYPE_UINT64): Triton runs "
        "it and passes the string's bytes on as the number; sonic refuses it (400) and says why.",
        "The model would see a correlation id that is neither the client's string nor any number it sent.",
        _string_sequence_id,
    ),
    Intended(
        "empty-bytes-output",
        "An empty BYTES output (shape with a 0): Triton's raw_output_contents entry (gRPC) or binary "
        "part (HTTP) holds 8 stray bytes; sonic's is empty.",
        "An empty tensor has no bytes; Triton's are uninitialised memory of its Python backend.",
        _empty_bytes,
    ),
    Intended(
        "unload-in-progress",
        "Right after an unload: Triton may still list the model as UNLOADING in the repository index "
        "and answer server readiness `false` meanwhile; sonic lists it UNAVAILABLE, reason `unloaded`, "
        "and stays ready.",
        "sonic's unload call returns when the model is unloaded; Triton finishes the Python backend's "
        "stub in the background. Both reach the same state.",
        _unloading,
    ),
    Intended(
        "server-metadata",
        "ServerMetadata (`GET /v2`): `version` is sonic's own, not `2.51.0`; `extensions` lists what "
        "sonic implements (no `cuda_shared_memory`). `name` is "
        "the same: `triton` unless `--id` says otherwise.",
        "A client that reads the extensions learns what it can use; a version that claimed Triton's "
        "would make bug reports point at the wrong server.",
        _server_metadata,
    ),
    Intended(
        "shm-unaligned-offset",
        "Registering system shared memory at an offset that is not a multiple of the page size "
        "(4096 bytes): Triton refuses it (`unable to process address spaceInvalid argument`, it maps "
        "the region at that offset); sonic registers it.",
        "Any offset inside the region is valid by the protocol; sonic maps the region from its start "
        "and serves the offset as a view. Clients that pack several tensors in one region work.",
        _unaligned,
    ),
    Intended(
        "extra-raw-contents",
        "More `raw_input_contents` entries than inputs: Triton ignores the extra ones and runs the "
        "request; sonic refuses it (INVALID_ARGUMENT) and says how many entries came for how many inputs.",
        "Raw contents are matched to inputs by position: an extra entry means the client's inputs and "
        "tensors are out of step, and the tensors used may not be the ones meant.",
        _extra_raw,
    ),
    Intended(
        "shm-empty-name",
        "Registering system shared memory under an empty name over gRPC: Triton registers it (and "
        "lists it in status); sonic refuses the name (INVALID_ARGUMENT), also where Triton refuses the call "
        "for its offset or size.",
        "A region with an empty name cannot be addressed by the HTTP API (`/v2/systemsharedmemory/region//...` "
        "has no route), and an empty name in unregister means every region.",
        _shm_empty_name,
    ),
    Intended(
        "empty-model-name-route",
        "HTTP model-control calls with an empty model name (`/v2/repository/models//load`): Triton has "
        "no route for them (404 `Not Found`); sonic routes them: a load refuses the name (400), an unload "
        "answers OK (200) as an unload of any name that is not loaded does, on Triton's gRPC too; in "
        "model-control modes other than explicit both are refused as every load and unload is (503).",
        "The answer says the name is the fault, not the path; unloading what is not loaded is no error.",
        _empty_name,
    ),
    Intended(
        "log-setting-values",
        "`POST /v2/logging` with a `log_format` other than `default`/`ISO8601`: Triton answers 503, sonic "
        "400 (gRPC: INVALID_ARGUMENT on both). A `log_verbose_level` of 2^32 or more: Triton takes it "
        "modulo 2^32 (2^32 turns verbose logging off), sonic refuses it (400).",
        "A 503 tells clients and load balancers to retry elsewhere, for the client's fault; the level is "
        "a uint32 on gRPC, and a number that does not fit is a mistake, not a level.",
        _log_setting_value,
    ),
    Intended(
        "traffic-log-key",
        "The log settings hold sonic's own key `traffic_log` (recording the traffic log on or off) on a "
        "server started with `--traffic-log DIR`; without it the key is not shown, and setting it is "
        "INVALID_ARGUMENT/400 naming `--traffic-log`. Triton ignores the key (OK/200).",
        "One switch for both the log and the traffic recording, through the API that clients already "
        "have; a caller that asks to record where nothing can be recorded is told so.",
        _traffic_log_key,
    ),
    Intended(
        "trace-setting-values",
        "`POST /v2/trace/setting` (or a model's) with a value of the wrong JSON type (`trace_rate` a "
        "number, `trace_level` not a list): Triton answers 500, sonic 400, with the same words. A "
        "`trace_level` other than `OFF`, `TIMESTAMPS`, `TENSORS`: Triton ignores it (200), sonic refuses "
        "it (400 / INVALID_ARGUMENT) and names the levels.",
        "A client's fault is not the server's; a level dropped without a word would leave the caller "
        "believing it traces what it does not.",
        _trace_setting_value,
    ),
    Intended(
        "trace-files",
        "Triton-mode trace files: over gRPC sonic writes `GRPC_WAITREAD_END` and `GRPC_SEND_START` but "
        "not `GRPC_WAITREAD_START` or `GRPC_SEND_END`; `COMPUTE_*` times come from sonic's scheduler; "
        "INT8/UINT8 tensor data are numbers (Triton writes the bytes as characters) and BYTES are JSON "
        "strings; a BLS call's child trace ends (`REQUEST_END`) with its last response where Triton's ends "
        "when it lets go of the request; a request to an unknown model writes nothing. Without a log "
        "frequency or count, traces go to the file as they complete (Triton keeps them in memory until "
        "it exits).",
        "The HTTP/2 writer does not say when a response left, and a time not known is not written; the "
        "file stays valid JSON; memory stays bounded however long the server runs.",
        _trace_files,
    ),
    Intended(
        "otlp-export",
        "OpenTelemetry mode (`--trace-config mode=opentelemetry`): sonic exports with the OpenTelemetry "
        "Python SDK's OTLP/HTTP exporter, which posts protobuf (`application/x-protobuf`), Triton 2.51 "
        "(opentelemetry-cpp 1.13) OTLP/HTTP JSON; the resource's `telemetry.sdk.*` are the Python SDK's; "
        "that exporter reads the `OTEL_EXPORTER_OTLP_*` variables as Python's does (`..._TIMEOUT` in "
        "seconds) and retries a batch the collector refuses (429, 502, 503, 504) or cannot be reached "
        "within that timeout (10 s), where Triton's tries once; the `..._ENDPOINT` and `..._PROTOCOL` "
        "variables, which neither reads (the URL is `opentelemetry,url`), are named in a warning; a `bsp_*` "
        "setting of 0 (flag or `OTEL_BSP_*`) is refused at start where Triton hands it on, and a batch size "
        "above the queue size is the queue size; over gRPC Triton now and then starts a trace of its own "
        "instead of continuing the client's `traceparent`, sonic always continues it; the root span "
        "`InferRequest` starts at the request's first activity (Triton's when it samples it); level "
        "`TENSORS`, which adds nothing in this mode, is logged as an error once per settings change "
        "(Triton: once per tensor).",
        "OpenTelemetry's own exporter for Python, not one of sonic's; protobuf is OTLP's default encoding "
        "and OTLP/HTTP receivers take both; the SDK's batch span processor cannot run with a zero, and a "
        "setting it cannot follow is refused rather than changed; the spans themselves (names, parents, "
        "attributes, events, batches) are Triton's.",
        _otlp_export,
    ),
    Intended(
        "json-not-utf8",
        "A JSON body with bytes that are not UTF-8 inside a string: Triton's parser takes them and goes "
        "on with the request (it runs it, 200, or its 400 names the next fault it finds, e.g. `Input must "
        "set only one of ... But no field is set`); sonic refuses the JSON (400 `... cannot be parsed: "
        "'utf-8' codec can't decode byte ...`).",
        "JSON is UTF-8 (RFC 8259); a name or id that is not text cannot be matched, logged or answered "
        "faithfully, and a request id echoed back would not be valid JSON either.",
        _json_not_utf8,
    ),
    Intended(
        "bytes-output-not-utf8",
        "A BYTES output that is not UTF-8 text, asked for in the JSON answer (`binary_data` false): "
        "Triton writes the bytes into the JSON as they are (200, a body that is not valid JSON); sonic "
        "refuses the request (400 `... BYTES output is not UTF-8 text; request it with binary_data: "
        "true`).",
        "JSON is UTF-8 (RFC 8259): a client's parser fails on the answer or, worse, replaces the bytes "
        "and hands on other data; the binary part carries any bytes.",
        _bytes_output_not_utf8,
    ),
    Intended(
        "chunked-with-content-length",
        "An HTTP/1.1 request with both `Transfer-Encoding: chunked` and `Content-Length` (Python "
        "`requests` sends both for a generator body given a length): Triton serves it (the chunked "
        "framing wins); sonic refuses it, 400, with a JSON error that names both headers, and closes "
        "the connection.",
        "The two headers disagree on where the body ends; a proxy in front that reads the other one "
        "would see another request in the same bytes (request smuggling). RFC 9112 section 6.1 lets a "
        "server treat the message as an error and close the connection.",
        _both_framings,
    ),
    Intended(
        "classification-order",
        "Classification (an output's `classification` parameter): in a row of more than 16 elements "
        "with a NaN, sonic lists NaN first; Triton's `std::sort` runs its unguarded loops with a "
        "comparison NaN breaks (undefined behaviour). A BYTES output asked as classification is refused "
        "in Triton's words for the other types it cannot classify (INVALID_ARGUMENT/400 `class result "
        "not available for output due to unsupported type 'BYTES'`); Triton 2.51 crashes (a division "
        "by zero).",
        "Undefined behaviour cannot be matched, and a request must not take the server down.",
        _classified_bytes,
    ),
    Intended(
        "header-forward-reserved",
        "`--grpc-header-forward-pattern` / `--http-header-forward-pattern`: a header named as one of "
        "Triton's request parameters (`sequence_id`, `sequence_start`, `sequence_end`, `priority`, "
        "`timeout`, `binary_data_output`, `triton_enable_empty_final_response`) is not forwarded (Triton "
        "shows it to the model as a string parameter); a header named as a parameter the client sent "
        "replaces it (Triton passes both and `json.loads` keeps the header's); HTTP values lose trailing "
        "whitespace; a pattern Python's `re` cannot read fails the start (Triton forwards nothing).",
        "sonic's request parameters are one mapping: a header string there would take the place of the "
        "value the scheduler reads. Trailing whitespace is not part of an HTTP field value (RFC 9110 "
        "5.5); a flag that silently does nothing is worse than one refused at start.",
        _never_generated,
    ),
    Intended(
        "ports-before-models",
        "Start-up: sonic binds its ports before the models load (meanwhile live answers 200, ready "
        "400 / ServerReady false, inferences UNAVAILABLE), so a port in use ends start-up at once "
        "with exit status 1; Triton binds them after loading every model and finds a port in use only"
        " then.",
        "A port clash found after minutes of loading wastes them; a server that answers live while it"
        " loads is what Kubernetes startup probes and launchers expect.",
        _not_a_request,
    ),
    Intended(
        "repository-unreadable",
        "A `--model-repository` that does not exist, is not a folder or cannot be read, with `--exit-"
        "on-error=false`: Triton logs the error and serves no model at all, never ready; sonic exits "
        "with status 1 and Triton's line, as both do with `--exit-on-error=true` (the default).",
        "A server of no model that stays up is a silent failure; `--exit-on-error=false` is meant for"
        " models that fail to load, not for a repository path with a typo.",
        _not_a_request,
    ),
    Intended(
        "unreadable-config-readiness",
        "With `--exit-on-error=false`: a model whose configuration cannot be read (a `config.pbtxt` "
        "that does not parse, a load override naming another model) leaves Triton's server ready (its "
        "index lists a `config.pbtxt` that does not parse with no state or reason); sonic lists it "
        "UNAVAILABLE with the "
        "reason, and with strict readiness (the default) the server is not ready until the model "
        "loads or is unloaded.",
        "Strict readiness means every model the server has is ready; a model missing for a typo in "
        "its configuration is what a load balancer must see, as it sees one that fails in its "
        "backend.",
        _not_a_request,
    ),
    Intended(
        "no-versions-index",
        "After a load request fails for a model folder with no version folders (`load failed for "
        "model ...: at least one version must be available under the version policy of model ...`): "
        "Triton 2.51 leaves the model out of the repository index; sonic lists "
        "it UNAVAILABLE with the reason. Both answer server readiness false under strict readiness "
        "(the default).",
        "The index is where a client or operator asks what the server has and why a model is not "
        "serving; a model that failed to load is listed with its reason, as Triton lists one that "
        "fails in its backend.",
        _not_a_request,
    ),
    Intended(
        "unexpected-input",
        "An input the model does not have, beside all it has: Triton answers with its input count "
        "message, naming no missing input (`expected 1 inputs but got 2 inputs ... missing required "
        "input(s) ]`); sonic names the input: `unexpected inference input 'BOGUS' for model ..., expected "
        "one of [...]`. Same status.",
        "Triton's message says something is missing when nothing is; the client's fault is the extra "
        "input, and naming it (and the model's inputs) says what to fix.",
        _unexpected_input,
    ),
    Intended(
        "negative-dimension",
        "A shape with a negative dimension other than -1 (e.g. `[-2]`), or a negative batch size for a "
        "BYTES input: Triton answers `input byte size mismatch ... Expected -4, got 2` or `expected "
        "4294967295 string elements ...` (a negative count, wrapped); sonic `shape [-2] has a negative "
        "dimension` or `batch-size must be in 1..N for '<model>', got -1`. Same status.",
        "No byte count can be negative: the fault is the shape, and the message says so.",
        _negative_dimension,
    ),
    Intended(
        "bytes-framing",
        "Raw BYTES data whose 4-byte length prefixes do not frame the buffer: Triton answers `incomplete "
        "string length indicator ...`, `incomplete string data ...`, `expected N string elements ... "
        "got M` or `unexpected number of string elements ...` by where its parser stops; sonic "
        "`malformed BYTES data: ...` with the element and the bytes left. Same status.",
        "sonic's one message says which element's prefix is wrong and how many bytes remain.",
        _bytes_framing,
    ),
    Intended(
        "http-parameter-on-grpc",
        "`binary_data_output` of a type other than boolean in a gRPC request: Triton ignores it (an "
        "HTTP parameter) and runs the request; sonic refuses it (INVALID_ARGUMENT), as over HTTP.",
        "One check of the parameters the server reads, whichever front end they came through; a "
        "wrong type is the client's mistake on both.",
        _http_parameter_on_grpc,
    ),
    Intended(
        "required-input-with-optional",
        "A model with optional inputs, asked without one of its required inputs: Triton runs it (the "
        "model gets no such input); sonic refuses it with Triton's own words for a missing input.",
        "The model's code expects a required input to be there; running without it fails in the model "
        "or, worse, answers as if it had been sent empty.",
        _required_with_optional,
    ),
    Intended(
        "zero-batch",
        "A batch size of 0 for a batched model: Triton answers `input byte size mismatch ...` with the "
        "bytes of a batch of one (`expected 1 string elements ...` for BYTES); sonic `inference request "
        "batch-size must be in 1..N for '<model>', got 0`. Same status.",
        "The fault is the batch size, and the message says so.",
        _zero_batch,
    ),
    Intended(
        "input-parameters-type",
        "An HTTP input or requested output whose `parameters` is not a JSON object (`[]`, a string, a "
        "number): Triton ignores it (and so reads no `binary_data_size` or `binary_data` there); sonic "
        "refuses it (400 `'parameters' must be an object`).",
        "An input's binary size the server cannot read makes it misread the binary part of the body; an "
        "output's choices (binary, shared memory, classification) dropped unread answer something else "
        "than asked.",
        _input_parameters,
    ),
    Intended(
        "missing-outputs",
        "A request for all outputs (none named) to a model that returns fewer than its configuration "
        "declares: Triton answers those it returned; sonic answers INTERNAL/500 naming those missing.",
        "A client asking for every output and getting fewer may read a missing one as empty; a model "
        "that leaves out a declared output is at fault, and the status says so.",
        _missing_outputs,
    ),
    Intended(
        "model-exception-text",
        "An exception raised in a Python model's `execute` (or by `pb_utils.Tensor` for what it cannot "
        "take: a Python list, a byte order other than the machine's): Triton answers `Failed to process "
        "the request(s) for model '<m>_0_0', message: <exception>` with the model's traceback; sonic "
        "`model '<m>': ...` with the exception (in a decoupled model's stream, Triton's words without "
        "the traceback). Same status.",
        "A traceback discloses the server's file paths to clients (docs/security.md); the exception "
        "itself says what failed.",
        _model_exception,
    ),
    Intended(
        "model-output-checked",
        "A Python model returning an output its configuration does not declare, or of another datatype "
        "than declared (an object array for an INT32 output, float64 for FP32): Triton drops the "
        "undeclared one and answers the other in the datatype the model gave; sonic answers INTERNAL/500 "
        "naming the output and both datatypes.",
        "Clients read an output by its configured datatype; answering another one, or dropping an "
        "output silently, is a silent wrong answer.",
        _model_output_checked,
    ),
    Intended(
        "output-order",
        "The outputs of an answer in another order, each the same: Triton lists a Python model's "
        "outputs in the order the model returned them; sonic in the order of the model's configuration.",
        "Clients find outputs by name (every client library does); the configuration's order is the "
        "one `ModelMetadata` gives.",
        _output_order,
    ),
    Intended(
        "model-load-failure-text",
        "A Python model whose code fails to load (its import, no `TritonPythonModel` class, its "
        "`auto_complete_config` or `initialize` raises): after the exception, where Triton's answer (and "
        "the repository index's reason) has the model's traceback (`At:` and the frames), sonic's says "
        "where it failed (`At:` the model file inside the repository, `<m>/1/model.py`, or the model and "
        "step). The rest is Triton's: `load "
        "failed for model '<m>': version 1 is at UNAVAILABLE state: Internal: <type>: <exception>;`. Where a "
        "version the policy names has no folder, sonic adds which after Triton's words.",
        "A traceback discloses the server's file paths and the backend's frames to clients "
        "(docs/security.md); the exception and where it was raised say what to fix.",
        _load_failure_text,
    ),
    Intended(
        "json-integer-range",
        "A JSON number out of an integer input's range (300 for UINT8, -1 for UINT16), or a gRPC typed "
        "content out of it (`uint_contents` 300 for UINT8): Triton takes it modulo the type's range (300 "
        "becomes 44) and runs the request; sonic refuses it (400 or INVALID_ARGUMENT `value 300 is out of "
        "range for UINT8 (0..255)`).",
        "The model would see another number than the client sent: a silent wrong answer.",
        _json_integer_range,
    ),
    Intended(
        "config-refused-at-load",
        "A configuration Triton 2.51 loads and sonic refuses (INVALID_ARGUMENT/400, in the poll's words "
        "then what is wrong): an input or output declared twice, `dynamic_batching` for a model with "
        "`max_batch_size` 0, an `instance_group` count below 0, a tensor `data_type` given as a number "
        "that names no data type.",
        "Two declarations of one tensor may disagree on its type and dims, and which one a request is "
        "checked against is not said; a batcher on a model that cannot batch, or a negative number of "
        "instances, is a configuration its author misread: serving it would hide the mistake; a tensor "
        "of no known type cannot be decoded or answered.",
        _config_refused,
    ),
    Intended(
        "cuda-shm-register",
        "Registering a CUDA shared-memory region: sonic answers UNIMPLEMENTED/501 (it has no CUDA "
        "shared memory; ServerMetadata does not list the extension); Triton 2.51 without a GPU refuses "
        "the handle (INVALID_ARGUMENT/400 `failed to register shared memory region: invalid args`, or "
        "`'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t`).",
        "A valid handle would be refused too; the answer says what is missing, not that the handle "
        "is wrong. Status and unregister calls answer as Triton's (no region).",
        _cuda_register,
    ),
    Intended(
        "unload-parameters",
        "An unload with a parameter other than `unload_dependents`, or (over HTTP) an `unload_dependents` "
        "that is not a boolean: Triton ignores it and unloads (OK/200); sonic refuses the call "
        "(INVALID_ARGUMENT/400), the second in the words of Triton's gRPC front end (`invalid value type "
        "for 'unload_dependents' parameter, expected bool_param.`).",
        "A parameter dropped without a word leaves the caller believing the server acted on it (a "
        "misspelt `unload_dependents` would leave the step models loaded).",
        _unload_parameters,
    ),
    Intended(
        "header-length-not-a-number",
        "An `Inference-Header-Content-Length` that is not a decimal number (`x`, `+5`, `1_0`): Triton reads "
        "as many digits as it finds (none: 0) and takes the whole body as one raw input (running it, or "
        "answering with the raw input's byte-size words); sonic refuses the header (400).",
        "A header that does not say where the JSON ends would have the body's JSON read as tensor bytes.",
        _header_length,
    ),
    Intended(
        "command-line-refusal",
        "A command line `sonic serve` refuses (a `--backend-config` Triton cannot read either: nothing before "
        "its comma, no `=`, an empty setting or value): Triton prints its usage text, `Bad option: "
        '"--backend-config".` and its message, and exits with status 1; sonic prints `sonic serve: ` and '
        "Triton's message, and exits with status 2, as for every flag it refuses or does not know.",
        "Status 2 is the usage error of sonic's command line (argparse's), the same for all its refusals; the "
        "one line is Triton's, and `sonic serve --help` gives the usage.",
        _not_a_request,
    ),
    Intended(
        "json-body-not-object",
        (
            "An HTTP repository index, load or unload whose body is JSON but no object (`[1]`, `3`): Triton "
            "reads no fields from it and answers as for an empty body (200); sonic refuses it (400 `request "
            "JSON must be an object`)."
        ),
        (
            "A body that is not the object the protocol defines is a client that meant something else (a list "
            "of models, a misplaced field): answering it as an empty request acts on a request nobody sent."
        ),
        _body_not_object,
    ),
    Intended(
        "shape-past-index-range",
        "An input whose shape holds a 0 and dimensions whose product is past what numpy can index "
        "(`[0, 2**62]`: no elements, so byte size and element count agree): Triton 2.51 hands it to the "
        "Python backend, whose stub process dies (INTERNAL `Stub process '<model>_0' is not healthy.`, for "
        "every later request to the model too); sonic refuses the request (400/INVALID_ARGUMENT `shape ... "
        "cannot be used`, numpy's reason after it).",
        "A request must not take a model down for every other client.",
        _tritons_stub_dies,
    ),
    Intended(
        "checksum-agent-built-in",
        "A model whose configuration asks for the `checksum` repository agent (`model_repository_agents`): "
        "the Triton 2.51 the comparisons run (nvidia-pytriton's `tritonserver`, no `repoagents` folder) "
        "cannot find `libtritonrepoagent_checksum.so` and refuses the load (INTERNAL/500 `failed to load "
        "'<m>', failed to poll from model repository`); sonic runs the agent built in, with its rules and "
        "words: the model loads when each `MD5:<file>` matches, and a mismatch is refused "
        "(INVALID_ARGUMENT/400, the poll's words, then `Mismatched MD5 hash for file <file>, expect: <value>, "
        "got: <md5>`). Any other agent is refused as Triton refuses it.",
        "Triton's containers ship the checksum agent and CMS's model repositories carry these sections: sonic "
        "answers as a container's Triton does, and a model whose files are not those its author hashed does "
        "not serve.",
        _checksum_agent,
    ),
)


def explain(call: Call, triton: Outcome, sonic: Outcome) -> str | None:
    """The id of the row that explains a difference, or None."""
    for row in INTENDED:
        if row.matches(call, triton, sonic):
            return row.id
    return None
