"""Plain aligned text tables: one place, so every command's and every Go header's table
reads alike. ``evolve.cli.output`` re-exports :func:`table` for the commands; workflows use
it for tables that go into files (``export-go``'s accuracy table in the Go header)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]],
          right: Sequence[int] = (), strip: bool = True) -> str:
    """A plain aligned text table; columns whose index is in ``right`` align right. Cells
    are shown ``printable`` (a run status or operator name read from an archive may hold
    a terminal escape: it is shown, never sent). ``strip=False`` keeps the trailing
    spaces of a row whose last cells are blank (``evolve fit``'s tables always had them)."""
    from evolve.text.untrusted import printable

    cells = [[printable(h) for h in headers]] + [[printable(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r: list[str]) -> str:
        text = "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        return text.rstrip() if strip else text

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), sep, *(line(r) for r in cells[1:])])
