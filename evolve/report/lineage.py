"""Page 4, lineage: the ancestry of the pick and the champion back to the seeds, with the
operator that made each edge and what it did to the loss.

Why a DAG and not a chain: crossover children have two parents, and the pick and the
champion often share ancestors; drawing every ancestor once, in layers by generation, shows
both. "Which mutation made the jump" is the edge with the largest relative drop in training
loss along the ancestry; it is marked on the drawing and in the table.

Losses on edges are each program's *first* accepted evaluation (the child as its operator
made it, the parent as it was then), so a later polish or rescore is not credited to the
mutation; nodes show the latest.

Layout: one layer per generation that has an ancestor (oldest at the top); within a layer,
nodes are ordered by the mean position of their parents (seeds by id), a one-pass
barycentre heuristic that keeps most edges short without a graph library.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from evolve.report.data import RunData
from evolve.report.pick import champion

MAX_NODES = 400  # a deeper ancestry is cut (marked) so the drawing stays readable
NODE_W, NODE_H, GAP_X, GAP_Y = 132, 40, 16, 46
LABEL_PAD = 110  # room right of the last node for an edge label
LEFT_PAD = 150  # room left of the first node: edges that skip layers bend out there
BEND = 70  # how far such an edge bends left of its ends


@dataclass
class Node:
    program_id: str
    generation: int
    operator: str
    train_loss: float
    complexity: int | None
    roles: list[str]
    x: float = 0.0
    y: float = 0.0


@dataclass
class LineageEdge:
    """parent -> child, made by ``operator``; losses at first evaluation, ``ratio`` =
    child loss / parent loss."""

    parent: str
    child: str
    operator: str
    child_loss: float
    parent_loss: float
    ratio: float
    jump: bool = False


@dataclass
class Lineage:
    nodes: dict[str, Node]
    edges: list[LineageEdge]
    targets: list[tuple[str, str]]  # (role, program id) whose ancestry is drawn
    truncated: bool
    width: int
    height: int


def ancestors(data: RunData, roots: list[str], limit: int = MAX_NODES) -> tuple[list[str], bool]:
    """Every ancestor of ``roots`` in the run (breadth first), and whether it was cut."""
    seen: dict[str, None] = {}
    queue = [r for r in roots if r in data.programs]
    while queue and len(seen) < limit:
        pid = queue.pop(0)
        if pid in seen:
            continue
        seen[pid] = None
        queue += [q for q in data.programs[pid].parents if q in data.programs and q not in seen]
    return list(seen), bool(queue)


def build_lineage(data: RunData) -> Lineage:
    pick, champ = data.pick_id(), champion(data)
    targets = [(role, pid) for role, pid in (("pick", pick), ("champion", champ)) if pid]
    if len(targets) == 2 and pick == champ:
        targets = [("pick and champion", str(pick))]
    ids, truncated = ancestors(data, [pid for _r, pid in targets])
    nodes: dict[str, Node] = {}
    for pid in ids:
        p = data.programs[pid]
        roles = [r for role, t in targets if t == pid for r in role.split(" and ")]
        roles += ["seed"] if p.kind == "seed" else []
        nodes[pid] = Node(pid, p.generation, p.operator, p.train_loss, p.complexity, roles)
    edges = []
    for pid, n in nodes.items():
        for q in dict.fromkeys(data.programs[pid].parents):
            if q in nodes:
                cl, ql = data.programs[pid].first_loss, data.programs[q].first_loss
                ratio = cl / ql if ql and math.isfinite(ql) and math.isfinite(cl) else math.nan
                edges.append(LineageEdge(q, pid, n.operator, cl, ql, ratio))
    finite = [e for e in edges if math.isfinite(e.ratio) and e.ratio < 1.0]
    if finite:
        min(finite, key=lambda e: (e.ratio, e.child)).jump = True
    edges.sort(key=lambda e: (nodes[e.child].generation, e.child, e.parent))
    width, height = _layout(nodes, data)
    return Lineage(nodes, edges, targets, truncated, width, height)


def _layout(nodes: dict[str, Node], data: RunData) -> tuple[int, int]:
    """Place nodes in generation layers; returns the drawing's size in px."""
    layers: dict[int, list[Node]] = {}
    for n in nodes.values():
        layers.setdefault(n.generation, []).append(n)
    width = 0
    for row, g in enumerate(sorted(layers)):
        layer = layers[g]

        def centre(n: Node, g: int = g) -> tuple[float, str]:
            xs = [nodes[q].x for q in data.programs[n.program_id].parents
                  if q in nodes and nodes[q].generation < g]
            return (sum(xs) / len(xs) if xs else math.inf, n.program_id)

        layer.sort(key=centre)
        for i, n in enumerate(layer):
            n.x = LEFT_PAD + i * (NODE_W + GAP_X)
            n.y = GAP_Y / 2 + row * (NODE_H + GAP_Y)
        width = max(width, LEFT_PAD + len(layer) * (NODE_W + GAP_X) + LABEL_PAD)
    height = int(len(layers) * (NODE_H + GAP_Y) + GAP_Y / 2)
    return int(width), height
