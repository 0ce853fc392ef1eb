"""Search building blocks: the MAP-Elites grid and NSGA-II ranking / frontier.

``grid``: :class:`Elite`, :class:`Grid` (best program per complexity-bin x feature-count
cell). ``pareto``: :func:`rank_and_crowding`, :func:`select_parents`, :class:`Frontier`.
The generation loop (``evolve.search.loop``) composes them with operators and fitting.
"""

from evolve.search.grid import DEFAULT_COMPLEXITY_EDGES, Cell, Elite, Grid, GridStats
from evolve.search.pareto import Frontier, rank_and_crowding, select_parents

__all__ = [
    "DEFAULT_COMPLEXITY_EDGES", "Cell", "Elite", "Frontier", "Grid", "GridStats",
    "rank_and_crowding", "select_parents",
]
