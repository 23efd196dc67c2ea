"""The CUDA runtime layer: NVRTC and the driver API, the only module that imports ``cuda.*``.

Every import of ``cuda.bindings`` is inside a function (lazy), so ``import gradc`` never loads it
and every other target works without it. Two services:

- ``nvrtc_compile``: CUDA source -> CUBIN for one architecture (no driver or GPU needed).
  ``cuda.bindings`` finds ``libnvrtc`` through ``cuda.pathfinder``; where that search misses the
  ``nvidia-cuda-nvrtc`` wheel (a site directory added by a ``.pth`` file), the library is loaded
  from the ``nvidia`` package's folder first.
- ``DeviceDriver``: one GPU through the driver API (context, stream, module, device memory,
  copies, launches captured as a CUDA graph), the ``Driver`` that ``runtime.CudaRunner`` uses.

Without the package, NVRTC's library, the driver or a GPU, the functions raise
``UnsupportedError`` saying which is missing.
"""

from __future__ import annotations

import ctypes
import glob
import os
from typing import Any, Callable, Sequence

import numpy as np

from gradc.errors import GradcError, UnsupportedError

from gradc.backends.cuda import dag

INSTALL = "pip install 'gradc[cuda]'"


def _bindings(module: str) -> Any:
    """``cuda.bindings.<module>``, or UnsupportedError when the package is missing."""
    try:
        if module == "nvrtc":
            from cuda.bindings import nvrtc  # lazy: optional dependency (gradc[cuda])
            return nvrtc
        from cuda.bindings import driver  # lazy: optional dependency (gradc[cuda])
        return driver
    except ImportError:
        raise UnsupportedError(f"cuda target: expected the cuda-bindings package ({INSTALL}), "
                               f"got none") from None


def _preload_nvrtc() -> bool:
    """Load ``libnvrtc`` from the ``nvidia`` wheels' folders (True when one loaded)."""
    try:
        import nvidia  # lazy: the namespace package of NVIDIA's wheels, optional
    except ImportError:
        return False
    for root in list(getattr(nvidia, "__path__", [])):
        for lib in sorted(glob.glob(os.path.join(root, "*", "lib", "libnvrtc.so.*")), reverse=True):
            if "builtins" in os.path.basename(lib):
                continue
            try:
                ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
                return True
            except OSError:
                continue
    return False


_NVRTC: dict[str, Any] = {}


def nvrtc() -> Any:
    """The NVRTC bindings with their library loaded (UnsupportedError when it cannot be)."""
    if "m" in _NVRTC:
        return _NVRTC["m"]
    m = _bindings("nvrtc")
    try:
        m.nvrtcVersion()
    except RuntimeError:  # cuda.pathfinder did not find the library where it looks
        if not _preload_nvrtc():
            raise UnsupportedError(f"cuda target: expected NVRTC (the nvidia-cuda-nvrtc "
                                   f"package, {INSTALL}), got none") from None
        m.nvrtcVersion()
    _NVRTC["m"] = m
    return m


def nvrtc_version() -> str:
    """``major.minor`` of the NVRTC library."""
    _, major, minor = nvrtc().nvrtcVersion()
    return f"{major}.{minor}"


def nvrtc_compile(source: str, options: list[str], name: str = "gradc.cu") -> bytes:
    """The CUBIN of ``source`` (GradcError with NVRTC's log when it does not compile)."""
    m = nvrtc()
    err, prog = m.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _nvrtc_check(m, err, "nvrtcCreateProgram")
    try:
        opts = [o.encode() for o in options]
        (err,) = m.nvrtcCompileProgram(prog, len(opts), opts)
        if err != m.nvrtcResult.NVRTC_SUCCESS:
            _, size = m.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            m.nvrtcGetProgramLog(prog, log)
            raise GradcError(f"cuda target: NVRTC failed on the generated source:\n"
                             f"{log.decode(errors='replace').strip(chr(0) + ' ').strip()[-3000:]}")
        err, size = m.nvrtcGetCUBINSize(prog)
        _nvrtc_check(m, err, "nvrtcGetCUBINSize")
        cubin = b" " * size
        (err,) = m.nvrtcGetCUBIN(prog, cubin)
        _nvrtc_check(m, err, "nvrtcGetCUBIN")
        return bytes(cubin)
    finally:
        m.nvrtcDestroyProgram(prog)


def _nvrtc_check(m: Any, err: Any, call: str) -> None:
    if err != m.nvrtcResult.NVRTC_SUCCESS:
        raise GradcError(f"cuda target: {call} failed ({err!r})")


_OPEN: dict[int, tuple[Any, str, Any, Any]] = {}  # ordinal -> (device, arch, context, stream)
_SIDE: dict[int, list[Any]] = {}  # ordinal -> the streams graph captures fork onto


class DeviceDriver:
    """One GPU through the driver API: its primary context and one stream (shared by every
    executable on that GPU), device memory, CUBINs compiled by ``compile``."""

    def __init__(self, compile: Callable[[str, str], bytes], ordinal: int = 0) -> None:
        self._compile = compile  # (source, architecture) -> CUBIN (build.compile_cubin)
        self.d = _bindings("driver")
        if ordinal not in _OPEN:
            _OPEN[ordinal] = self._open(ordinal)
        self.device, self.arch, self.context, self.stream = _OPEN[ordinal]
        self._keep: list[Any] = []  # launch parameter arrays, alive while graphs use them
        self._side = _SIDE.setdefault(ordinal, [])  # the streams a capture forks onto
        self._mark: Any = None  # the event of ``mark``, made on first use

    def _open(self, ordinal: int) -> tuple[Any, str, Any, Any]:
        """Initialize the driver and open a GPU (UnsupportedError without one)."""
        d = self.d
        try:
            (err,) = d.cuInit(0)
        except RuntimeError:  # libcuda.so.1 is not installed
            raise UnsupportedError("cuda target: expected an NVIDIA GPU and its driver "
                                   "(libcuda), got no driver") from None
        if err != d.CUresult.CUDA_SUCCESS:
            raise UnsupportedError(f"cuda target: expected an NVIDIA GPU, got none "
                                   f"(cuInit: {self._name(err)})")
        count = self._ok(d.cuDeviceGetCount(), "cuDeviceGetCount")
        if not 0 <= ordinal < count:
            raise UnsupportedError(f"cuda target: device: expected a GPU in 0..{count - 1}, "
                                   f"got {ordinal}")
        device = self._ok(d.cuDeviceGet(ordinal), "cuDeviceGet")
        attr = d.CUdevice_attribute
        major = self._ok(d.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device), "attribute")
        minor = self._ok(d.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device), "attribute")
        context = self._ok(d.cuDevicePrimaryCtxRetain(device), "cuDevicePrimaryCtxRetain")
        self._ok(d.cuCtxSetCurrent(context), "cuCtxSetCurrent")
        stream = self._ok(d.cuStreamCreate(1), "cuStreamCreate")  # non-blocking
        return device, f"sm_{major}{minor}", context, stream

    # -- helpers ----------------------------------------------------------------------------
    def _name(self, err: Any) -> str:
        _, name = self.d.cuGetErrorName(err)
        return name.decode() if isinstance(name, bytes) else str(err)

    def _ok(self, result: Any, call: str) -> Any:
        """The value of a driver call, or an error naming it (MemoryError when out of it)."""
        err, *rest = result if isinstance(result, tuple) else (result,)
        if err != self.d.CUresult.CUDA_SUCCESS:
            if err == self.d.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
                raise MemoryError(f"cuda target: {call}: out of device memory")
            raise GradcError(f"cuda target: {call} failed ({self._name(err)})")
        return rest[0] if len(rest) == 1 else tuple(rest) if rest else None

    def _current(self) -> None:
        self._ok(self.d.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def _ptr(self, p: int) -> Any:
        return self.d.CUdeviceptr(int(p))

    # -- the Driver protocol (runtime.py) ----------------------------------------------------
    def load(self, source: str, kernels: Sequence[str]) -> Any:
        """Compile a program for this GPU's architecture (or take it from the cache) and load
        it; returns the module."""
        cubin = self._compile(source, self.arch)
        self._current()
        image = np.frombuffer(cubin, np.uint8)
        return self._ok(self.d.cuModuleLoadData(image.ctypes.data), "cuModuleLoadData")

    def function(self, module: Any, name: str) -> Any:
        """A kernel of a loaded module."""
        return self._ok(self.d.cuModuleGetFunction(module, name.encode()), "cuModuleGetFunction")

    def alloc(self, nbytes: int) -> int:
        """``nbytes`` of device memory (256-byte aligned)."""
        self._current()
        return int(self._ok(self.d.cuMemAlloc(max(1, nbytes)), "cuMemAlloc"))

    def free(self, ptr: int) -> None:
        """Free what ``alloc`` returned (quietly: it runs from finalizers, also at exit)."""
        self.d.cuMemFree(self._ptr(ptr))

    def upload(self, dst: int, src: np.ndarray) -> None:
        """Host -> device, ordered on the stream."""
        self._current()  # a call may come from another thread than the one that compiled
        self._ok(self.d.cuMemcpyHtoDAsync(self._ptr(dst), src.ctypes.data, src.nbytes,
                                          self.stream), "cuMemcpyHtoDAsync")

    def download(self, dst: np.ndarray, src: int) -> None:
        """Device -> host, after everything before it on the stream."""
        self._current()
        self._ok(self.d.cuMemcpyDtoHAsync(dst.ctypes.data, self._ptr(src), dst.nbytes,
                                          self.stream), "cuMemcpyDtoHAsync")
        self.synchronize()

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        """Device -> device, ordered on the stream."""
        self._current()
        self._ok(self.d.cuMemcpyDtoDAsync(self._ptr(dst), self._ptr(src), nbytes, self.stream),
                 "cuMemcpyDtoDAsync")

    def capture(self, functions: list[tuple[Any, int, int, bool]], arena: int,
                deps: Sequence[Sequence[int]] | None = None) -> Any:
        """The launches (function, grid, block, barrier), each with ``arena`` as its argument,
        captured once as an instantiated CUDA graph. ``deps`` (``dag.dependencies``): the
        earlier launches each must follow; the launches are then spread over a few streams
        (``dag.assign_streams``) joined by events, so the graph is a DAG whose independent
        kernels overlap. Without ``deps`` the graph is the chain of launches in order."""
        d = self.d
        arg = np.array([arena], np.uint64)
        params = np.array([arg.ctypes.data], np.uint64)
        self._keep += [arg, params]
        self._current()
        plan = dag.assign_streams(deps, dag.MAX_STREAMS) if deps is not None else \
            [(0, ())] * len(functions)
        used = sorted({s for s, _ in plan})
        while len(self._side) < len(used) - 1:
            self._side.append(self._ok(d.cuStreamCreate(1), "cuStreamCreate"))
        streams = [self.stream] + self._side
        events: list[Any] = []
        mode = d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        self._ok(d.cuStreamBeginCapture(self.stream, mode), "cuStreamBeginCapture")
        try:
            fork = self._event(events)
            self._ok(d.cuEventRecord(fork, self.stream), "cuEventRecord")
            started, last = {0}, {0: -1}
            done: list[Any] = []
            for j, ((fn, grid, block, _), (s, waits)) in enumerate(zip(functions, plan)):
                st = streams[s]
                if s not in started:  # a side stream joins the capture through the fork
                    self._ok(d.cuStreamWaitEvent(st, fork, 0), "cuStreamWaitEvent")
                    started.add(s)
                for w in waits:
                    self._ok(d.cuStreamWaitEvent(st, done[w], 0), "cuStreamWaitEvent")
                self._ok(d.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, st,
                                          params.ctypes.data, 0), "cuLaunchKernel")
                done.append(self._event(events))
                self._ok(d.cuEventRecord(done[-1], st), "cuEventRecord")
                last[s] = j
            for s in started - {0}:  # every side stream joins back before the capture ends
                self._ok(d.cuStreamWaitEvent(self.stream, done[last[s]], 0),
                         "cuStreamWaitEvent")
        finally:
            graph = self._ok(d.cuStreamEndCapture(self.stream), "cuStreamEndCapture")
            for e in events:
                d.cuEventDestroy(e)
        return self._ok(d.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")

    def _event(self, events: list[Any]) -> Any:
        """A new event without timing (kept in ``events`` to be destroyed)."""
        events.append(self._ok(self.d.cuEventCreate(2), "cuEventCreate"))  # DISABLE_TIMING
        return events[-1]

    def replay(self, graph: Any) -> None:
        """Launch a captured graph on the stream."""
        self._current()
        self._ok(self.d.cuGraphLaunch(graph, self.stream), "cuGraphLaunch")

    def synchronize(self) -> None:
        """Wait for the stream; a kernel's fault surfaces here."""
        self._ok(self.d.cuStreamSynchronize(self.stream), "cuStreamSynchronize")

    def mark(self) -> Any:
        """An event after the work queued so far on the stream (``wait_mark`` waits for it)."""
        if self._mark is None:
            self._mark = self._ok(self.d.cuEventCreate(2), "cuEventCreate")  # DISABLE_TIMING
        self._ok(self.d.cuEventRecord(self._mark, self.stream), "cuEventRecord")
        return self._mark

    def wait_mark(self, mark: Any) -> None:
        """Wait until the stream has passed ``mark``."""
        self._ok(self.d.cuEventSynchronize(mark), "cuEventSynchronize")

    def wait_for_others(self) -> None:
        """Wait for all work of the context (other streams' writes to a foreign array)."""
        self._ok(self.d.cuCtxSynchronize(), "cuCtxSynchronize")
