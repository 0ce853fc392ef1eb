"""Program ids read from an archive: checked against the id format, and against the source.

Why: an archive is a file people share (a colleague's ``archive.db``, a CI artifact, a
database several users write), so every value read from it is untrusted. A program id
becomes a file name (the report's ``p/<id>.html``), an HTML attribute and a label; an id
holding ``../`` or ``"><img onerror=...>`` once wrote outside the report's folder and ran
script in it. So ids are checked on *read*, by one function (:func:`checked_id`) that the
archive's column types call for every id column (:mod:`evolve.archive.models`): a reader
cannot forget it. And an id is a content hash (sha256 hex of the stored source: the
normalised source of a parsed program, the text itself of one that did not parse), so a
source edited under an existing id is caught by :func:`source_matches` before a command
exports, shows or reports it as that program.
"""

from __future__ import annotations

import hashlib
import re

from evolve.errors import ArchiveError

ID_FORMAT = re.compile(r"[0-9a-f]{64}")  # sha256, lower-case hex
EDITED = "the file was edited or damaged"


def checked_id(value: object, where: str) -> str:
    """``value`` if it is a program id (64 lower-case hex digits), else a one-line
    :class:`ArchiveError` naming ``where`` (``table.column``) with the value escaped."""
    if isinstance(value, str) and ID_FORMAT.fullmatch(value):
        return value
    shown = repr(value[:40] + ("..." if len(value) > 40 else "")) if isinstance(value, str) \
        else type(value).__name__
    raise ArchiveError(f"the archive's {where} holds {shown}, not a program id (64 hex "
                       f"digits): {EDITED}")


def checked_ids(value: object, where: str) -> list[str]:
    """A stored list of program ids (``programs.parent_ids``), each checked."""
    if not isinstance(value, list):
        raise ArchiveError(f"the archive's {where} holds {type(value).__name__}, not a list of "
                           f"program ids: {EDITED}")
    return [checked_id(v, where) for v in value]


def source_id(source: str) -> str:
    """The id of a stored source: sha256 hex of its UTF-8 bytes (a lone surrogate of an
    unparsed reply kept as it came)."""
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()


def source_matches(program_id: str, source: object) -> bool:
    """Whether ``source`` is the text ``program_id`` is the hash of."""
    return isinstance(source, str) and source_id(source) == program_id


def check_source(program_id: str, source: object, where: str) -> str:
    """``source`` if it hashes to ``program_id``, else a one-line :class:`ArchiveError`:
    an edited source must not be exported, shown or re-checked as that program."""
    if not source_matches(program_id, source):
        raise ArchiveError(f"{where}: stored program {program_id[:12]}: its source does not "
                           f"hash to its id ({EDITED}); refused")
    return str(source)
