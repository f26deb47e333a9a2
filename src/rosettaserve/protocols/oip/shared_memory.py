"""Triton's system shared memory: regions a client registers (a POSIX shared-memory object under
/dev/shm, an offset into it and a size), inputs read from them and outputs written into them.

A region is opened, checked against the object's real size and mapped once, at register; every
offset and size a request names is checked against the region before any byte is touched. An
input is a read-only view of the mapping (no copy); an output is written with ``pwrite`` on the
region's descriptor, which cannot fault even if the client shrank the object meanwhile. A region
unregistered while requests use it stays mapped for them: the mapping goes when the last view of
it does (an in-flight request holds the region, and so its descriptor, until it ends).

One limit remains, as in Triton: a client that shrinks its object while a model reads an input
from it makes that read fault. Each request checks the object's size before it maps a view, so
only a shrink during the model's read is not caught.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import stat
import weakref
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from rosettaserve.core import dtypes
from rosettaserve.core.codec import to_raw
from rosettaserve.core.errors import InvalidInput, NotFound, ServingError, Unsupported
from rosettaserve.core.status import ErrorKind
from rosettaserve.core.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor

REGION: Final = "shared_memory_region"
OFFSET: Final = "shared_memory_offset"
BYTE_SIZE: Final = "shared_memory_byte_size"
OUTPUTS: Final = "shared_memory_outputs"  # request.context: output name -> where it goes
SHM_DIR: Final = "/dev/shm"
# Triton keeps this prefix for its Python backend's own regions, and refuses it from clients.
RESERVED_PREFIX: Final = "triton_python_backend_shm_region_"
WORKERS_REFUSAL: Final = (
    "system shared memory needs --workers 1: a region registered with one worker process "
    "would be unknown to the others"
)
DISABLED_REFUSAL: Final = (  # Triton's text
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
)
MAX_REGIONS: Final = 256  # each holds a descriptor and a mapping
_OPEN_FLAGS: Final = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class RegionExists(ServingError):
    kind = ErrorKind.ALREADY_EXISTS


class Region:
    """One registered region: its descriptor, kept open, and its mapping (read-only)."""

    def __init__(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self.name, self.key, self.offset, self.byte_size = name, key, offset, byte_size
        self.fd = _open(name, key)
        self._closer = weakref.finalize(self, os.close, self.fd)
        try:
            if _object_size(self.fd) < offset + byte_size:
                raise InvalidInput(
                    f"failed to register shared memory region '{name}': invalid args"
                )
            start = offset - offset % mmap.ALLOCATIONGRANULARITY  # mmap wants aligned offsets
            self._map = mmap.mmap(
                self.fd, offset + byte_size - start, mmap.MAP_SHARED, mmap.PROT_READ, offset=start
            )
        except BaseException:
            self._closer()
            raise
        self.view: memoryview | None = memoryview(self._map)[offset - start :]

    def slice(self, offset: int, byte_size: int) -> tuple[int, int]:
        """``offset``, ``byte_size`` checked against the region (Triton's messages), and
        against the object's size now (a client may have shrunk it since register)."""
        name = self.name
        if offset >= self.byte_size:
            raise InvalidInput(f"Invalid offset for shared memory region: '{name}'")
        if offset + byte_size > self.byte_size:
            raise InvalidInput(f"Invalid offset + byte size for shared memory region: '{name}'")
        if _object_size(self.fd) < self.offset + offset + byte_size:
            raise InvalidInput(
                f"shared memory region '{name}' is smaller than when it was registered: "
                f"its object '{self.key}' was shrunk"
            )
        return offset, byte_size

    def read(self, offset: int, byte_size: int) -> memoryview:
        offset, byte_size = self.slice(offset, byte_size)
        if self.view is None:
            raise NotFound(f"Unable to find shared memory region: '{self.name}'")
        return self.view[offset : offset + byte_size]

    def write(self, offset: int, data: Any) -> None:
        """``data`` at ``offset`` of the region (already checked by ``slice``)."""
        view = memoryview(data).cast("B")
        at, done = self.offset + offset, 0
        while done < len(view):  # (pwrite may write less than asked, past 2 GiB)
            done += os.pwrite(self.fd, view[done:], at + done)

    def release(self) -> None:
        """Unmapped now, or once the last view in use is gone (the mapping holds itself)."""
        view, self.view = self.view, None
        if view is not None:
            view.release()
        with contextlib.suppress(BufferError):  # views still in use: the mapping goes with
            self._map.close()  # the last of them

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "key": self.key,
            "offset": self.offset,
            "byte_size": self.byte_size,
        }


def _open(name: str, key: str) -> int:
    """The descriptor of the object ``key`` names, as shm_open names it: leading slashes, then
    one file name under /dev/shm (no directory, no link, a regular file)."""
    base = key.lstrip("/")
    if not base or "/" in base or base in (".", "..") or "\0" in base or len(base) > 255:
        raise InvalidInput(
            f"cannot register shared memory region '{name}' - invalid shm key '{key}'"
        )
    if base.startswith(RESERVED_PREFIX):
        raise InvalidInput(
            f"cannot register shared memory region '{name}' with key '{key}' as the key "
            f"contains the reserved prefix '{RESERVED_PREFIX}'"
        )
    try:
        fd = os.open(os.path.join(SHM_DIR, base), _OPEN_FLAGS)
    except OSError:
        raise InvalidInput(f"Unable to open shared memory region: '{key}'") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InvalidInput(f"Unable to open shared memory region: '{key}'")
    return fd


def _object_size(fd: int) -> int:
    return os.fstat(fd).st_size


class Regions:
    """The server's registered regions, by name. ``refusal``: set where regions cannot work
    (several worker processes: a region registered with one would be unknown to the others)."""

    def __init__(self) -> None:
        self._by_name: dict[str, Region] = {}
        self.refusal: str | None = None

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        if self.refusal is not None:
            raise Unsupported(self.refusal)
        if not name:
            raise InvalidInput("'region name' is necessary to register system shared memory region")
        if name in self._by_name:
            raise RegionExists(f"shared memory region '{name}' already in manager")
        if len(self._by_name) >= MAX_REGIONS:
            raise InvalidInput(
                f"failed to register shared memory region '{name}': {MAX_REGIONS} regions are "
                "registered already (unregister some first)"
            )
        if byte_size <= 0:
            raise InvalidInput(f"failed to register shared memory region '{name}': invalid args")
        self._by_name[name] = Region(name, key, offset, byte_size)

    def status(self, name: str = "") -> list[dict[str, Any]]:
        if not name:
            return [r.status() for r in self._by_name.values()]
        region = self._by_name.get(name)
        if region is None:
            raise NotFound(f"Unable to find system shared memory region: '{name}'")
        return [region.status()]

    def unregister(self, name: str = "") -> None:
        """One region, or every one (``name`` empty); an unknown name is no error (Triton)."""
        if self.refusal is not None:
            raise Unsupported(self.refusal)
        names = [name] if name else list(self._by_name)
        for each in names:
            region = self._by_name.pop(each, None)
            if region is not None:
                region.release()

    def get(self, name: str) -> Region:
        region = self._by_name.get(name)
        if region is None:
            raise NotFound(f"Unable to find shared memory region: '{name}'")
        return region


REGIONS: Final = Regions()  # one server a process, as one Triton a process


def refusal(allowed: bool, several_workers: bool) -> str | None:
    """Why registration is refused, if it is: not allowed (the default: a client that may
    register any object the server can open could read it back through a model), or several
    worker processes (a region registered with one would be unknown to the others)."""
    if not allowed:
        return DISABLED_REFUSAL
    return WORKERS_REFUSAL if several_workers else None


@dataclass(frozen=True, slots=True)
class Placement:
    region: Region
    offset: int
    byte_size: int


def placement(params: dict[str, Any], name: str) -> Placement | None:
    """Where a tensor's parameters place it in shared memory, checked; None: not there."""
    region = params.get(REGION)
    if region is None:
        for key in (OFFSET, BYTE_SIZE):
            if key in params:
                raise InvalidInput(
                    f"'{key}' can not be specified without '{REGION}' parameter for tensor '{name}'"
                )
        return None
    if not isinstance(region, str):
        raise InvalidInput(
            f"invalid value type for '{REGION}' parameter for tensor '{name}', expected a string"
        )
    if BYTE_SIZE not in params:
        raise InvalidInput(
            f"'{BYTE_SIZE}' must be specified along with '{REGION}' parameter for tensor '{name}'"
        )
    offset, size = _count(params, OFFSET, name), _count(params, BYTE_SIZE, name)
    found = REGIONS.get(region)
    found.slice(offset, size)
    return Placement(found, offset, size)


def _count(params: dict[str, Any], key: str, name: str) -> int:
    value = params.get(key, 0)
    if type(value) is not int or value < 0:
        raise InvalidInput(
            f"invalid value for '{key}' parameter for tensor '{name}': "
            f"expected a non-negative integer, got {value!r}"
        )
    return value


def input_bytes(params: dict[str, Any], name: str) -> memoryview | None:
    """An input's bytes from the region its parameters name (read-only, not copied); None:
    the input does not name one."""
    if not params or (REGION not in params and OFFSET not in params and BYTE_SIZE not in params):
        return None
    where = placement(params, name)
    if where is None:
        return None
    return where.region.read(where.offset, where.byte_size)


def output_placements(outputs: list[RequestedOutput] | None) -> dict[str, Placement] | None:
    """The requested outputs to write into shared memory, checked before the model runs."""
    if not outputs:
        return None
    found: dict[str, Placement] = {}
    for out in outputs:
        params = out.parameters
        if not params:
            continue
        where = placement(params, out.name)
        if where is None:
            continue
        if "classification" in params:
            raise InvalidInput("Output can't set both 'shared_memory_region' and 'classification'")
        if params.get("binary_data") is True:
            raise InvalidInput("Output can't set both 'shared_memory_region' and 'binary_data'")
        found[out.name] = where
    return found or None


def note_outputs(request: InferenceRequest) -> None:
    """Outputs requested in shared memory, checked and kept in the request's context."""
    placements = output_placements(request.outputs)
    if placements is not None:
        request.context[OUTPUTS] = placements


def place_outputs(request: InferenceRequest, response: InferenceResponse) -> None:
    """Outputs requested in shared memory written there; in the answer, their name, datatype and
    shape only (as Triton answers them: no data, an empty raw buffer over gRPC)."""
    placements: dict[str, Placement] | None = request.context.get(OUTPUTS)
    if placements is None:
        return
    for i, tensor in enumerate(response.outputs):
        where = placements.get(tensor.name)
        if where is not None:
            response.outputs[i] = _placed(tensor, where)


def _placed(tensor: Tensor, where: Placement) -> Tensor:
    dtype = dtypes.lookup(tensor.datatype)
    raw = to_raw(tensor.data, dtype)
    size = memoryview(raw).nbytes
    if size > where.byte_size:
        raise InvalidInput(
            f"shared memory size specified with the request for output '{tensor.name}' "
            f"({where.byte_size} bytes) should be at least {size} bytes to hold the results"
        )
    where.region.slice(where.offset, size)  # (shrunk since the request came in?)
    where.region.write(where.offset, raw)
    return Tensor(tensor.name, tensor.datatype, tensor.shape, np.empty(0, dtype.numpy), {})


def in_shared_memory(params: dict[str, Any]) -> bool:
    """Whether a requested output's parameters send it to shared memory (answered without
    data)."""
    return bool(params) and REGION in params
