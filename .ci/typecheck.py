"""Type-check the gradc package with mypy, under its real module names.

pyproject.toml maps directories to packages (``compiler/`` is ``gradc``, ``ir/`` is ``gradc.ir``,
...). mypy cannot follow that mapping, nor the import hook of an editable install, so this script
builds the package as it is installed, a tree of symlinks to the source files, in ``.mypy-src/``
(git-ignored; rebuilt on every run), and runs ``mypy`` on it with the settings of [tool.mypy]
(``mypy_path`` points there). Paths in mypy's report are mapped back to the source files.

Usage (from any directory): .venv/bin/python .ci/typecheck.py [mypy options]
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / ".mypy-src"


def package_dirs(setuptools: dict) -> dict[str, Path]:
    """The source directory of each package, as setuptools resolves ``package-dir``."""
    mapping = setuptools.get("package-dir", {})
    out = {}
    for pkg in setuptools["packages"]:
        parts = pkg.split(".")
        for k in range(len(parts), -1, -1):
            prefix = ".".join(parts[:k])
            if prefix in mapping or k == 0:
                base = mapping.get(prefix, "")
                out[pkg] = ROOT.joinpath(base, *parts[k:])
                break
    return out


def build_tree() -> None:
    """Recreate ``.mypy-src/`` with one symlink per module file of each package."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    shutil.rmtree(TREE, ignore_errors=True)
    for pkg, src in package_dirs(config["tool"]["setuptools"]).items():
        dst = TREE.joinpath(*pkg.split("."))
        dst.mkdir(parents=True, exist_ok=True)
        for f in sorted(src.iterdir()):
            if f.is_file() and (f.suffix in (".py", ".pyi") or f.name == "py.typed"):
                (dst / f.name).symlink_to(f)


def source_path(line: str) -> str:
    """A report line with a ``.mypy-src/...`` path replaced by the source file's path."""
    path, sep, rest = line.partition(":")
    if sep and path.startswith(".mypy-src" + os.sep):
        return os.path.relpath((ROOT / path).resolve(), ROOT) + sep + rest
    return line


def main() -> int:
    build_tree()
    proc = subprocess.run([sys.executable, "-m", "mypy", *sys.argv[1:]], cwd=ROOT,
                          capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        print(source_path(line))
    sys.stderr.write(proc.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
