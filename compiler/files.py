"""Writing files atomically: readers see the old file or the whole new one, never a part.

The one helper for every file gradc writes for the user (outputs of the command line, saved
training state, loss curves): the bytes go to a temporary file in the same folder (so that the
rename stays on one file system), are flushed and fsync'ed, and the file is renamed over the
target with ``os.replace`` (atomic on POSIX and Windows); then the folder is fsync'ed where the
system allows, so that the rename itself survives a crash. On any failure, Ctrl-C included, the
temporary file is removed and the old file is left as it was.

(``gradc.backends.c.build`` keeps its own small writer for its compile cache: a backend may not
import the driver, and a lost cache entry only costs a recompile.)
"""

from __future__ import annotations

import os
import tempfile

TEMP_PREFIX = ".gradc-"  # temporary files start so: hidden, and easy to tell apart


def write_bytes_atomically(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace the file at ``path`` with ``data`` all at once (see the module docstring)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data: expected bytes, got {type(data).__name__}")
    target = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(target))
    fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual mode
        os.replace(tmp, target)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    _fsync_folder(folder)


def write_text_atomically(path: str | os.PathLike[str], text: str) -> None:
    """Replace the file at ``path`` with ``text`` in UTF-8, all at once."""
    if not isinstance(text, str):
        raise TypeError(f"text: expected str, got {type(text).__name__}")
    write_bytes_atomically(path, text.encode("utf-8"))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_folder(folder: str) -> None:
    # Durability of the rename; a system or file system that cannot open or sync a folder
    # (Windows, some network mounts) still has the atomic rename, so this is best effort.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
