"""Names vulture (the dead-code check of ``./dev test``) cannot see used: each is called or read by a
framework, a library, or users' code, never by name in this tree. Vulture only parses this file.

Add a name here only with the reason it is used; dead code is deleted instead.
"""

# ruff: noqa
# mypy: ignore-errors

# --- pytest: module markers, hooks, and fixtures requested by parameter name -----------------------------
pytestmark
pytest_collection_modifyitems  # tests/conftest.py
triton_server  # tests/integration/client/conftest.py
triton_and_sonic  # tests/integration/client/test_resilience.py
plugin_on_path  # tests/unit/backends/test_registry.py
pytest_terminal_summary  # tests/integration/differential/conftest.py
_current_test  # tests/integration/differential/conftest.py (autouse: the test a comparison belongs to)
no_leftovers  # tests/integration/perf/test_perf_shm.py

# --- protocols whose signatures are fixed by Python ------------------------------------------------------
exc_type  # __exit__ / __aexit__ arguments
tb
_.pause_writing  # asyncio.Protocol flow control (protocol/h2asyncio.py)
_.resume_writing
_.teardown  # dask.distributed WorkerPlugin (workflow/dask_plugin.py)
_.formatTime  # logging.Formatter (logs.py IsoTextFormatter)
_._missing_  # enum.Enum lookup hook: the `native` alias of `h2` (client/config.py, server/config.py)
sizehint  # asyncio.BufferedProtocol.get_buffer's argument (h2/aio.py: the core decides the size)
_.write_with_length  # aiohttp.payload.Payload, called by aiohttp 3.12+ (server/frontends/http_payload.py)
_.stream_opened  # ServerCore hook of trees before sonic.h2 (benchmarks/h2_cost_worker.py)
_.do_POST  # http.server.BaseHTTPRequestHandler (the OTLP receivers of tests/*/test_trace_otlp.py)
_.log_message

# --- attributes libraries read after we set them ---------------------------------------------------------
_.intra_op_num_threads  # onnxruntime.SessionOptions
_.inter_op_num_threads
_.enable_cpu_mem_arena
_.enable_mem_pattern
_.ir_version  # onnx.ModelProto
_.momentum  # torch BatchNorm (models/zoo/resnet.py)
_.last_inference  # protobuf ModelStatistics field (tests/unit/test_inline_execution.py zeroes it)
_.int64_param  # protobuf InferParameter fields
_.double_param
_.uint32_param  # protobuf LogSettings SettingValue field
_.header_table  # hpack.Decoder (protocol/http2.py)
_.header_table_size  # hpack.Encoder (tests/fuzz/test_h2_fuzz.py)
_.warn_missing_crossrefs  # coffea NanoAODSchema option (tests/integration/coffea)

# --- API that users' code calls ---------------------------------------------------------------------------
# triton_python_backend_utils, as Triton's Python backend offers it to model.py files
_.set_model_transaction_policy
_.log_info
_.log_warn
_.log_error
_.log_verbose
_.is_cpu
_.to_dlpack
# coffea's triton_wrapper (coffea/wrapper.py): called by coffea's base class
_.validate_numpy_input
_.numpy_call
_._client_args  # kept in the pickled state (__getstate__ copies __dict__)
# backends registered by dotted path in server/backends/__init__.py
EnsembleBackend
FilBackend
TensorFlowGraphDefBackend
FpgaDevice  # the protocol a card implementation provides (server/backends/fpga.py; EmulatedFpga is one)

# --- every code of a wire enum, named as the specification names them ------------------------------------
OUT_OF_RANGE  # GrpcCode (protocol/errors.py)
INTERNAL_ERROR  # HTTP/2 ErrorCode (protocol/http2.py)

# --- fields of results written out whole (asdict/JSON, reports) or read by users -------------------------
p90_ms  # benchmarks/harness/load.py, saved as JSON
mean_ms  # benchmarks/harness/load.py (JSON), perf/analyze_traffic.py Trial (sonic analyze-traffic's JSON)
bytes_received  # workflow/report.py, in the run report
start_s
succeeded  # ClientStatistics: public counters (sonic.client)
failed_tries
peak_bytes  # testing/fuzz.py Outcome: shown in its repr when a fuzz assertion fails
_._sender_handle  # pb_utils.InferenceRequest: keeps the response sender's handle alive with the request
