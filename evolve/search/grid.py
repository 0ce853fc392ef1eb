"""MAP-Elites grid: the best program per (complexity bin, number of distinct features) cell.

Why these descriptors: the search should keep small programs and programs that read few
features alive even while a bigger program holds the best loss, so that the frontier
(loss vs complexity) and the operators always have diverse parents to work from.

Interface (used by ``evolve.search.loop`` and ``evolve.archive``):

* :class:`Elite` – ``program_id, loss, complexity, n_features, generation``; a plain record,
  the grid never sees program text.
* ``Grid(complexity_edges=DEFAULT_COMPLEXITY_EDGES, max_features=N_FEATURES)``.
  ``complexity_edges`` are increasing ints ``e_0 < ... < e_m``; bin ``j`` holds
  ``e_j <= complexity < e_{j+1}``. Complexities below ``e_0`` fall into bin 0, at or above
  ``e_m`` into the last bin, so nothing is ever dropped for its descriptor. The feature axis
  has one bin per count ``0..max_features`` (larger counts clip to ``max_features``).
* ``Grid.cell_of(complexity, n_features) -> (bin, n)``; ``Grid.try_insert(elite) -> bool``
  (True if the elite now holds its cell).
* A cell keeps the minimum of ``(loss, program_id, generation)``: the lowest loss, ties
  broken by program id, then by generation. Non-finite losses are never inserted. Hence
  the final content depends only on the *set* of inserted elites, never on their order.
* ``elites()`` (sorted by cell), ``cells()`` -> ``[(cell, elite)]`` for storage,
  ``Grid.from_cells(cells, ...)`` to restore, ``best()``, ``stats()`` (coverage, QD score).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from evaluator.api import N_FEATURES
from evolve.config.schema import DEFAULT_COMPLEXITY_EDGES

Cell = tuple[int, int]  # (complexity bin index, number of distinct features)

# Bins of width 3 over complexity 1..30 (the language's cap); bin j = [edge_j, edge_j+1).

# A loss of 1.0 is a 100 % RMS error: an elite contributes ``max(0, ref - loss)`` to the QD
# score, so useless programs add nothing and every cell's contribution is bounded.
DEFAULT_QD_REF_LOSS = 1.0


@dataclass(frozen=True)
class Elite:
    """One archived, fitted program as the search sees it.

    ``loss`` (training) decides cells and the frontier; ``val_loss`` (the validate split,
    nan without one) is read only by the pick and the champion (``evolve.search.selection``).
    """

    program_id: str
    loss: float
    complexity: int
    n_features: int
    generation: int
    val_loss: float = field(default=math.nan, compare=False)

    def key(self) -> tuple[float, str, int]:
        """Total order used inside a cell: lower is better."""
        return (self.loss, self.program_id, self.generation)


@dataclass(frozen=True)
class GridStats:
    """Summary of a grid for progress lines and the archive."""

    n_elites: int
    n_cells: int
    coverage: float  # n_elites / n_cells
    qd_score: float  # sum over elites of max(0, ref_loss - loss)
    best_loss: float  # inf when empty
    best_id: str | None


class Grid:
    """Best elite per descriptor cell; see the module docstring for the exact rules."""

    def __init__(self, complexity_edges: Sequence[int] = DEFAULT_COMPLEXITY_EDGES,
                 max_features: int = N_FEATURES) -> None:
        edges = tuple(int(e) for e in complexity_edges)
        if len(edges) < 2 or any(b <= a for a, b in pairwise(edges)):
            raise ValueError(f"complexity_edges must be >= 2 strictly increasing ints: {edges}")
        if max_features < 0:
            raise ValueError(f"max_features must be >= 0, got {max_features}")
        self.complexity_edges = edges
        self.max_features = int(max_features)
        self._cells: dict[Cell, Elite] = {}

    @property
    def shape(self) -> tuple[int, int]:
        """(number of complexity bins, number of feature-count bins)."""
        return (len(self.complexity_edges) - 1, self.max_features + 1)

    @property
    def n_cells(self) -> int:
        rows, cols = self.shape
        return rows * cols

    def cell_of(self, complexity: int, n_features: int) -> Cell:
        """The cell of a descriptor pair; out-of-range values clip to the edge bins."""
        edges = self.complexity_edges
        j = 0
        while j < len(edges) - 2 and complexity >= edges[j + 1]:
            j += 1
        return (j, min(max(int(n_features), 0), self.max_features))

    def try_insert(self, elite: Elite) -> bool:
        """Insert if the cell is empty or ``elite`` beats its holder; True if it now holds it."""
        if not math.isfinite(elite.loss):
            return False
        cell = self.cell_of(elite.complexity, elite.n_features)
        holder = self._cells.get(cell)
        if holder is not None and holder.key() <= elite.key():
            return False
        self._cells[cell] = elite
        return True

    def get(self, cell: Cell) -> Elite | None:
        return self._cells.get(cell)

    def __len__(self) -> int:
        return len(self._cells)

    def __contains__(self, program_id: object) -> bool:
        return any(e.program_id == program_id for e in self._cells.values())

    def cells(self) -> list[tuple[Cell, Elite]]:
        """All occupied cells, sorted by cell: the form the archive stores."""
        return sorted(self._cells.items(), key=lambda item: item[0])

    def elites(self) -> list[Elite]:
        """All elites in cell order (deterministic)."""
        return [e for _cell, e in self.cells()]

    def best(self) -> Elite | None:
        """The elite with the lowest ``(loss, program_id, generation)``, or None if empty."""
        return min(self._cells.values(), key=Elite.key, default=None)

    def stats(self, ref_loss: float = DEFAULT_QD_REF_LOSS) -> GridStats:
        elites = self.elites()
        best = self.best()
        return GridStats(
            n_elites=len(elites),
            n_cells=self.n_cells,
            coverage=len(elites) / self.n_cells,
            qd_score=float(sum(max(0.0, ref_loss - e.loss) for e in elites)),
            best_loss=best.loss if best is not None else math.inf,
            best_id=best.program_id if best is not None else None,
        )

    @classmethod
    def from_cells(cls, cells: Iterable[tuple[Cell, Elite]],
                   complexity_edges: Sequence[int] = DEFAULT_COMPLEXITY_EDGES,
                   max_features: int = N_FEATURES) -> Grid:
        """Rebuild a grid from ``cells()`` output.

        Raises ``ValueError`` if a stored cell does not match the elite's descriptors under
        the given edges (the grid was stored with another configuration) or if two stored
        elites claim the same cell.
        """
        grid = cls(complexity_edges, max_features)
        for cell, elite in cells:
            expected = grid.cell_of(elite.complexity, elite.n_features)
            if tuple(cell) != expected:
                raise ValueError(f"elite {elite.program_id} stored in cell {tuple(cell)} but "
                                 f"belongs in {expected} under these bin edges")
            if expected in grid._cells:
                raise ValueError(f"two stored elites claim cell {expected}")
            if not grid.try_insert(elite):
                raise ValueError(f"elite {elite.program_id} has a non-finite loss")
        return grid
