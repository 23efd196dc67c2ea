"""Writing files atomically: readers see the old file or the whole new one, never a part.

The one helper for every file gradc writes for the user (outputs of the command line, saved
training state, loss curves): the bytes go to a temporary file in the same folder (so that the
rename stays on one file system), are flushed and fsync'ed, and the file is renamed over the
target with ``os.replace`` (atomic on POSIX and Windows); then the folder is fsync'ed where the
system allows, so that the rename itself survives a crash. On any failure, Ctrl-C included, the
temporary file is removed and the old file is left as it was.

``check_input_file``, ``check_output_file`` and ``wrote`` are the command line's one check of a
file it reads, one check of a file it will write (before any work), and one report of a file it
wrote (on stdout).

(``gradc.backends.c.build`` keeps its own small writer for its compile cache: a backend may not
import the driver, and a lost cache entry only costs a recompile.)
"""

from __future__ import annotations

import os
import tempfile

from gradc.errors import InputError

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


def check_input_file(path: str | os.PathLike[str]) -> None:
    """InputError unless ``path`` names a file that can be read: the one check of every file
    gradc reads for the user, so that each says what is wrong in the same words."""
    target = os.fspath(path)
    if os.path.isdir(target):
        raise InputError(f"{target}: is a directory, expected a file")
    if not os.path.exists(target):
        raise InputError(f"{target}: no such file")
    if not os.path.isfile(target):
        raise InputError(f"{target}: not a regular file")
    if not os.access(target, os.R_OK):
        raise InputError(f"{target}: not readable (permission denied)")


def check_output_file(path: str | os.PathLike[str], flag: str = "") -> None:
    """InputError unless a file can be written at ``path``: its folder exists and the path
    is not a folder. Commands run it on every output before any work, so that a typo in
    ``-o`` costs nothing; ``flag`` (``-o``) starts the message."""
    target = os.fspath(path)
    what = f"{flag} {target}" if flag else target
    folder = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(folder):
        raise InputError(f"{what}: folder {folder} does not exist")
    if os.path.isdir(target):
        raise InputError(f"{what}: is a directory, expected a file name")


def wrote(path: str | os.PathLike[str], what: str = "") -> None:
    """The one line every command prints on stdout for a file it wrote: ``wrote PATH: what``."""
    print(f"wrote {os.fspath(path)}" + (f": {what}" if what else ""), flush=True)


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
