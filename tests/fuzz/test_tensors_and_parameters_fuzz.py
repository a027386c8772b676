"""Fuzzing what a request names besides its messages: tensor bytes against a declared shape, request
parameters, and the parameters of a shared-memory registration.

The shared-memory tests stay in the parameter layer: region names and their owner check
(:mod:`sonic.protocol.shm_names`), offsets and sizes against a region, and registration with keys that
either name a segment this test made or one that does not exist (never another process's segment).
"""

from __future__ import annotations

import contextlib
import mmap
import uuid

from hypothesis import given
from hypothesis import strategies as st

from sonic.protocol import dtypes
from sonic.protocol.errors import InvalidArgumentError, SonicError
from sonic.protocol.shm_names import owner_exited, pid_namespace, region_prefix
from sonic.protocol.types import REQUEST_PARAMETERS, check_parameters
from sonic.server.shm.opening import SHM_ROOT
from sonic.server.shm.regions import Region, SharedMemoryRegistry
from sonic.testing.fuzz import mutated, one_in, run_bounded

MAX_BUFFER_BYTES = 1024
PEAK_BYTES = 1 << 20

# Dimensions far past any buffer first: a shape is the one number of a request that costs nothing to send.
dims = st.sampled_from([2**20, 2**31, 2**40, 2**62]) | st.integers(0, 4)


@st.composite
def tensor_bytes(
    draw: st.DrawFn, names: tuple[str, ...] = tuple(dtypes.BY_NAME)
) -> tuple[bytes, dtypes.Datatype, tuple[int, ...]]:
    """Bytes for a shape (BYTES elements length-prefixed), then the bytes or the shape changed."""
    datatype = dtypes.BY_NAME[draw(st.sampled_from(names))]
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
    count = dtypes.element_count(shape)
    if datatype.name == "BYTES":
        items = draw(st.lists(st.binary(max_size=8), min_size=count, max_size=count))
        data = b"".join(len(item).to_bytes(4, "little") + item for item in items)
    else:
        data = draw(
            st.binary(min_size=count * datatype.numpy.itemsize, max_size=count * datatype.numpy.itemsize)
        )
    if draw(one_in(3)):
        data = draw(mutated(data))
    if draw(st.booleans()):
        shape = tuple(draw(st.lists(dims, min_size=1, max_size=4)))
    return data[:MAX_BUFFER_BYTES], datatype, shape


@given(tensor_bytes() | tensor_bytes(("BYTES",)))  # BYTES, decoded element by element, twice as often
def test_tensor_bytes_against_any_shape(case: tuple[bytes, dtypes.Datatype, tuple[int, ...]]) -> None:
    """The shape is the client's: whatever it claims, memory follows the bytes actually sent."""
    data, datatype, shape = case
    outcome = run_bounded(
        lambda: dtypes.array_from_bytes(data, datatype, shape, "input 'x'"),
        allowed=(InvalidArgumentError,),
        max_peak_bytes=PEAK_BYTES,
    )
    if outcome.value is not None:
        assert outcome.value.shape == shape


parameter_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=4),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner, max_size=2),
    max_leaves=4,
)


@given(
    st.dictionaries(
        st.sampled_from(list(REQUEST_PARAMETERS)) | st.text(max_size=8), parameter_values, max_size=5
    )
)
def test_request_parameters(parameters: dict[str, object]) -> None:
    """Accepted parameters have the protocol's types (a bool is never an int); the rest are a 400."""
    outcome = run_bounded(
        lambda: check_parameters(parameters, "model 'm'"),
        allowed=(InvalidArgumentError,),
        max_peak_bytes=PEAK_BYTES,
    )
    if outcome.error is None:
        for key, value in parameters.items():
            assert isinstance(value, bool | int | float | str)
            expected = REQUEST_PARAMETERS.get(key)
            if expected is not None:
                assert isinstance(value, expected)
                assert isinstance(value, bool) == (bool in expected)


# Region names: sonic's own pattern with changed numbers (a pid far past any, digits of other scripts),
# and anything else.
region_names = st.one_of(
    st.builds(
        lambda pid, namespace, rest: f"sonic_{pid}_n{namespace}_{rest}",
        st.integers(0, 2**70) | st.just("\u0661\u0662") | st.just("9" * 5000),
        st.just(pid_namespace()) | st.integers(0, 2**70),
        st.text(max_size=8),
    ),
    st.text(max_size=24),
    st.builds(lambda n: f"{region_prefix()}_{n}", st.integers(0, 9)),
)


@given(region_names)
def test_region_owner_check(name: str) -> None:
    """Run for every registered region before each register and status call: any name is a yes or no."""
    outcome = run_bounded(lambda: owner_exited(name, pid_namespace()), allowed=(), max_peak_bytes=PEAK_BYTES)
    assert outcome.value in {True, False}


@given(
    st.integers(1, 4096),
    st.integers(-(2**64), 2**64) | st.integers(-2, 4098),
    st.integers(-(2**64), 2**64) | st.integers(-2, 4098),
)
def test_region_bounds(size: int, offset: int, byte_size: int) -> None:
    """What a request names inside a region lies within it as registered, or is refused (the check every
    read, view and write makes first)."""
    with mmap.mmap(-1, size) as mapping:
        region = Region("r", "/k", 0, size, -1, (0, 0), mapping)
        outcome = run_bounded(
            lambda: region.check(offset, byte_size, "input 'x'"),
            allowed=(InvalidArgumentError,),
            max_peak_bytes=PEAK_BYTES,
        )
        if outcome.error is None:
            assert 0 <= offset <= offset + byte_size <= size


SEGMENT_BYTES = mmap.PAGESIZE
# Keys that name nothing: under a prefix no one else uses, without "/" (the key is a file name); NUL
# included (refused by name: os.open would raise ValueError for it).
absent_keys = st.builds(
    lambda text: f"/sonic_fuzz_absent_{uuid.uuid4().hex}_{text}",
    st.text(st.characters(exclude_characters="/", codec="utf-8"), max_size=8),
)


@given(
    st.text(max_size=12).filter(lambda name: not name.startswith("sonic_")),
    st.booleans(),
    absent_keys,
    st.integers(0, 2**64 - 1) | st.integers(-4, SEGMENT_BYTES + 4),
    st.integers(0, 2**64 - 1) | st.integers(-4, SEGMENT_BYTES + 4),
)
def test_register_parameters(name: str, existing: bool, absent: str, offset: int, byte_size: int) -> None:
    """A registration either maps a region inside the segment or is refused with a 4xx-class status.

    Names that look like sonic's own (``sonic_<pid>_n<ns>_``) are left out here: the registry would take
    such a region for a dead client's and unlink its key (test_region_owner_check covers the names)."""
    segment = f"sonic_fuzz_{uuid.uuid4().hex}"
    path = SHM_ROOT / segment
    with path.open("wb") as handle:
        handle.truncate(SEGMENT_BYTES)
    registry = SharedMemoryRegistry()
    key = f"/{segment}" if existing else absent
    try:
        outcome = run_bounded(
            lambda: registry.register(name, key, offset, byte_size),
            allowed=(SonicError,),
            max_peak_bytes=PEAK_BYTES,
        )
        if outcome.error is None:
            assert name
            assert offset >= 0
            assert byte_size > 0
            assert offset + byte_size <= SEGMENT_BYTES
            (region,) = registry.status(name)
            assert (region.offset, region.byte_size) == (offset, byte_size)
    finally:
        registry.close()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
