"""Every exception evolve raises on purpose, in one leaf module that imports nothing of ours.

Why one leaf: the CLI turns expected errors into one line and exit code 2, the search loop
turns some of them into a clean stop, and deep layers (archive, config, operators) raise
them. If the classes lived in the CLI, the archive would import the CLI; if they lived in
each layer, the loop would have to import the LLM operator to recognise its budget error.
Here, everyone imports this module and dispatches on *type*, never on class names.

The tree::

    EvolveError
    ├── UserError                one line, exit 2 (bad input the user can fix)
    │   ├── ConfigError          a config file or value
    │   ├── ArchiveError         archive missing, corrupt, other schema, unknown id
    │   ├── CassetteError        a cassette line is corrupt
    │   │   └── CassetteMiss     replay asked for an exchange the cassette lacks
    │   ├── BudgetExhausted      the LLM token/cost budget is spent (the loop stops cleanly)
    │   ├── LLMUnavailable       the endpoint failed a batch and on_failure = "stop"
    │   └── ClusterLost          the Ray cluster went away mid-run (resumable)
    ├── ProgramError (ValueError) untrusted program text rejected: rule, line, node
    └── ExportError (ValueError)  a program cannot be translated to Go

``evaluator.api.DataError`` (a malformed measured-data file) belongs to the evaluator,
which never imports evolve; the CLI treats it like a ``UserError``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = [
    "ArchiveError", "BudgetExhausted", "CassetteError", "CassetteMiss", "ClusterLost",
    "ConfigError", "EvolveError", "ExportError", "LLMUnavailable", "ProgramError", "UserError",
]


class EvolveError(Exception):
    """Base of every exception evolve raises on purpose."""


class UserError(EvolveError):
    """A problem with the user's input; printed as one line, exit code 2."""


class ClusterLost(UserError):
    """The Ray cluster of a run stopped answering; the run can be resumed once it is back."""


class ConfigError(UserError):
    """A configuration file or value is invalid; the message is one line."""


class ArchiveError(UserError):
    """The archive is missing, corrupt, of another schema version, or lacks a record."""


class CassetteError(UserError):
    """A cassette cannot be used: a corrupt line, or (in replay) a request it does not hold.

    A run must stop on it: continuing would break the promise that replay reproduces the
    recorded archive. A ``UserError``, so the CLI prints it as one line (exit code 2).
    """


class CassetteMiss(CassetteError):
    """Replay asked for a request hash the cassette does not contain."""

    def __init__(self, path: Path, request_hash: str):
        self.path = path
        self.request_hash = request_hash
        super().__init__(f"cassette {path}: no recorded exchange for request {request_hash} "
                         "(was it recorded with the same config, prompts and seed?)")


class BudgetExhausted(UserError):
    """The run's LLM token or cost budget is spent; the loop should end the run cleanly.

    A ``UserError`` so that, if the loop does not catch it, the CLI still stops with one
    line; the generation in progress is not committed and the run can be resumed.
    """


class LLMUnavailable(UserError):
    """The endpoint failed a whole batch and ``on_failure="stop"`` (one line in the CLI).

    ``proposals``: the failed batch (error proposals with their ``llm_call``), so the loop
    can still archive what was attempted.
    """

    def __init__(self, message: str, proposals: list[Any]):
        super().__init__(message)
        self.proposals = proposals


class ProgramError(EvolveError, ValueError):
    """A program was rejected: ``rule`` (stable id), ``reason``, ``line`` and ``node`` text."""

    def __init__(self, reason: str, rule: str, line: int | None = None, node: str = ""):
        self.reason, self.rule, self.line, self.node = reason, rule, line, node
        where = f" (line {line})" if line else ""
        snippet = f": `{node}`" if node else ""
        super().__init__(f"{rule}{where}: {reason}{snippet}")


class ExportError(EvolveError, ValueError):
    """A program cannot be translated to Go (the message says which construct and why)."""
