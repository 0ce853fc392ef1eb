"""A content digest of an archive, for byte-for-byte determinism checks.

Why a digest and not a file comparison: SQLite files differ in page layout and in the
informational columns (wall clock, code version) even when two runs decided everything
the same way. The digest covers every row of every table in primary-key order, minus
those columns (:meth:`Archive.comparable`), serialised canonically (sorted keys, floats by
``repr``, bytes as hex), so equal digests mean equal archives.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from evolve.archive.store import Archive


def _canonical(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return {"hex": bytes(value).hex()}
    if isinstance(value, float):
        return {"float": repr(value)}
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    return value


def archive_digest(archive: Archive) -> str:
    """sha256 hex of the archive's comparable content."""
    text = json.dumps(_canonical(archive.comparable()), sort_keys=True, separators=(",", ":"),
                      default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
