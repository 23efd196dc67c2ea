"""CUDA source -> CUBIN with NVRTC, cached on disk by a hash of source, options, architecture
and NVRTC version (as the C target caches its libraries).

The options keep every operation rounded as the reference rounds it: no contraction of
``a * b + c`` into a fused multiply-add (``--fmad=false``), no flush of subnormals to zero, IEEE
division and square root. The CUBIN is compiled for the GPU's own architecture (``sm_90`` on an
H200), so the driver never JIT-compiles PTX. Writes are atomic (a temporary file of the cache
directory, then ``os.replace``): concurrent builds of one graph all succeed.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from gradc.errors import GradcError

from gradc.backends.cuda import rt

EXACT_OPTIONS = ("--fmad=false", "--ftz=false", "--prec-div=true", "--prec-sqrt=true")
DEFAULT_ARCH = "sm_90"  # what is compiled for when no GPU says otherwise (CI)


def options(arch: str) -> list[str]:
    """NVRTC's options for one architecture."""
    return [f"--gpu-architecture={arch}", *EXACT_OPTIONS, "--std=c++17"]


def compile_cubin(source: str, arch: str, cache_dir: str) -> bytes:
    """The CUBIN of ``source`` for ``arch`` (``sm_XY``), from the cache when it is there."""
    opts = options(arch)
    version = rt.nvrtc_version()
    key = hashlib.sha256("\0".join([source, *opts, arch, version]).encode()).hexdigest()
    path = Path(cache_dir) / f"{key[:32]}.cubin"
    try:
        return path.read_bytes()
    except OSError:
        pass
    cubin = rt.nvrtc_compile(source, opts)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".cubin")
        with os.fdopen(fd, "wb") as f:
            f.write(cubin)
        os.replace(tmp, path)
    except OSError as e:
        raise GradcError(f"cuda target: cache_dir: expected a writable directory, got "
                         f"{str(path.parent)!r} ({e.strerror})") from None
    return cubin
