"""The one error hierarchy of gradc: every refusal is a ``GradcError``."""

from __future__ import annotations


class GradcError(Exception):
    """Base class of every error gradc raises on purpose."""


class VerifyError(GradcError):
    """An invalid graph, operator argument or type."""


class ParseError(GradcError):
    """Malformed text IR; carries the 1-based line and column."""

    def __init__(self, message: str, line: int = 0, column: int = 0) -> None:
        self.line = line
        self.column = column
        super().__init__(f"{line}:{column}: {message}" if line else message)


class UnsupportedError(GradcError):
    """An operator or feature that an importer or backend does not support."""


class InputError(GradcError):
    """An array given to an Executable that does not match the graph."""


class ResourceError(GradcError):
    """A run that needs more memory than the machine (or the process's limit) can give."""
