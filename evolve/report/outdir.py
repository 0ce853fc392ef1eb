"""The report's folder (``--out``): written only where it is the report's own, and only
the report's own files in it, never anything else deleted.

Why: ``--out`` is a path a user types, and a reused one once cost a user their files (an
existing folder's ``p/notes.html`` was removed as a "stale page", its ``index.html``
overwritten without a word). So the report keeps a marker, :data:`MARKER`, listing every
file it wrote:

* a folder that does not exist or is empty becomes a report;
* a folder holding the marker is an earlier report: its pages are rewritten, and a page
  the marker lists that this report does not have (another run's program) is removed;
  nothing the marker does not list is touched;
* a folder that is not empty and holds no marker is refused before anything is written,
  except a report written before the marker existed (every entry one of the report's own
  page names), which is taken over without deleting anything;
* ``p/`` must be a folder inside ``--out``, not a link elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path

from evolve.errors import UserError

MARKER = ".evolve-report"
FORMAT = 1
PAGES = frozenset({"index.html", "frontier.html", "lineage.html", "llm.html",
                   "validation.html"})
_PROGRAM_PAGE = re.compile(r"p/[0-9a-f]{16}\.html")


def _refuse(out: Path, why: str) -> UserError:
    return UserError(f"--out {out}: {why}; pass a new or empty directory, or an earlier "
                     "report's")


def _listed(out: Path) -> set[str] | None:
    """The files the marker lists (None: no marker; an unreadable one lists nothing)."""
    path = out / MARKER
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        files = doc["files"] if isinstance(doc, dict) else []
    except (OSError, ValueError, KeyError, RecursionError):
        return set()
    return {f for f in files if isinstance(f, str) and _ours(f)}


def _ours(name: str) -> bool:
    """A path the report writes (relative to ``--out``)."""
    return name in PAGES or bool(_PROGRAM_PAGE.fullmatch(name))


def _legacy(out: Path) -> bool:
    """A report written before the marker: every entry is one of its page names."""
    for entry in out.iterdir():
        if entry.name == "p" and entry.is_dir() and not entry.is_symlink():
            if not all(f.is_file() and _ours(f"p/{f.name}") for f in entry.iterdir()):
                return False
        elif not (entry.is_file() and entry.name in PAGES):
            return False
    return True


def check(out: Path) -> set[str]:
    """Refuse ``out`` (one line) unless the report may write there; the files an earlier
    report in it wrote (its marker's list) otherwise. Writes nothing."""
    if out.exists() and not out.is_dir():
        raise _refuse(out, "exists and is not a directory")
    if (out / "p").is_symlink() or ((out / "p").exists() and not (out / "p").is_dir()):
        raise _refuse(out, "its p/ is not a directory inside it")
    listed = _listed(out) if out.is_dir() else set()
    if listed is not None:
        return listed
    if not any(out.iterdir()) or _legacy(out):
        return set()
    raise _refuse(out, f"not empty and not an evolve report (no {MARKER} file)")


def claim(out: Path, planned: set[str]) -> set[str]:
    """Check ``out`` and mark it as this report's before any page is written (listing what
    it held and what is about to be written); returns the files the earlier report
    listed."""
    earlier = check(out)
    out.mkdir(parents=True, exist_ok=True)
    _mark(out, earlier | planned)
    return earlier


def finish(out: Path, earlier: set[str], written: set[str]) -> None:
    """List exactly ``written``, and remove what the earlier report listed and this one
    does not have (another run's program pages): only files the marker named."""
    _mark(out, written)
    for name in sorted(earlier - written):
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            (out / name).unlink()


def _mark(out: Path, files: set[str]) -> None:
    path = out / MARKER
    tmp = path.with_name(MARKER + ".tmp")
    tmp.write_text(json.dumps({"format": FORMAT, "written_by": "evolve report",
                               "files": sorted(files)}, indent=0) + "\n", encoding="utf-8")
    os.replace(tmp, path)
