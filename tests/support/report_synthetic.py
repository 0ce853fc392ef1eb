"""A synthetic archive of any size, written through the real ``Archive`` API, in seconds.

Why: the report's builders need archives with every feature (seeds, offline and LLM
children, crossover, rejections, grid turnover, frontiers per generation, validate and test
metrics), and the benchmark needs 10,000 programs; a real search would take minutes to
hours. Rows follow the loop's conventions (one evaluation per proposal in proposal order,
one LLM call per LLM proposal in the same order, the grid and frontier after every
generation), so what the report infers from a real archive it infers here too.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

from evolve.archive import Archive, final_scores
from evolve.archive.ids import source_id
from evolve.archive.models import Evaluation, FrontierRow, GridCell, LLMCall, ProgramRow
from evolve.assess.heldout import split_loss

EDGES = [1, 4, 7, 10, 13, 16, 19, 22, 25, 28, 31]
FEATURES = ["batch_size", "kv_write", "prefill_tokens", "decode_tokens", "kv_read",
            "attn_flops", "gemm_flops", "allreduce_bytes"]
RUNS = {"llama-7b-codegen@240-360s": "train", "llama-7b-roleplay@240-360s": "train",
        "mixtral-general@120-240s": "train", "codellama-codegen@120-240s": "validate",
        "llama-7b-reasoning": "test"}
MODELS = ("llama-2-7b", "mixtral-8x7b", "codellama-34b")
SEED_SOURCE = '''"""Seed {name}: a fixed cost per step plus a cost per request."""
CONSTANTS = {{"per_step_us": (100.0, 1.0, 10000.0), "per_req_us": (10.0, 0.0, 1000.0)}}


def step_time(f, c):
    # one line per term, so children's diffs stay readable
    return (c.per_step_us
            + c.per_req_us * f.batch_size)
'''


def _metrics(rng: random.Random, loss: float) -> dict[str, dict]:
    out = {}
    for name, split in RUNS.items():
        scale = loss * (1.6 if split != "train" else 1.0)
        ape = {k: abs(rng.gauss(0, scale)) for k in ("e2e_mean", "ttft_mean", "itl_mean",
                                                      "e2e_p99", "failures")}
        meas = {"e2e_mean": 2.0 + rng.random(), "ttft_mean": 0.03 + 0.02 * rng.random(),
                "itl_mean": 0.008, "e2e_p99": 3.0, "failures": 0.0}
        pred = {k: v * (1 + ape[k]) for k, v in meas.items()}
        out[name] = {"name": name, "split": split, "model": "llama-2-7b", "workload": "x",
                     "n_ok": 500, "n_failed": 0, "pred": pred, "meas": meas, "ape": ape,
                     "valid": True, "reason": "",
                     "mode": "teacher_forced" if split == "test" else "closed_loop_slice"}
    return out


def _child_source(parent: str, i: int, rng: random.Random) -> str:
    lines = parent.rstrip("\n").split("\n")
    feat = rng.choice(FEATURES)
    if rng.random() < 0.3 and sum(ln.strip().startswith("+") for ln in lines) > 1:
        drop = max(j for j, ln in enumerate(lines) if ln.strip().startswith("+"))
        del lines[drop]
        if not lines[-1].rstrip().endswith(")"):
            lines[-1] += ")"
    else:
        lines[-1] = lines[-1].rstrip(")")
        lines.append(f"            + c.k{i} * f.{feat})")
    lines[0] = f'"""Program {i}: derived by the synthetic operator."""'
    return "\n".join(lines) + "\n"


def make_archive(path: str | Path, n_programs: int = 60, generations: int = 6,
                 seed: int = 1, llm: bool = True, finals: bool = True) -> Path:
    """Write a finished run with about ``n_programs`` programs; returns ``path``. With
    ``finals``, also the end-of-run closed-loop test figures of the last hall of fame
    (``evolve.archive.final_scores``), as a finished run writes them."""
    rng = random.Random(seed)
    path = Path(path)
    config = {"run": {"generations": generations, "seed": seed, "data": "/data"},
              "operator": {"kind": "llm" if llm else "offline"},
              "llm": {"model": "test-model", "cassette": None},
              "search": {"pick_rule": "validate", "pick_tolerance": 1.5,
                         "complexity_edges": EDGES},
              "fit": {"fitness": "closed_loop", "scope": "per_model"}}
    with Archive(path) as ar:
        rid = ar.create_run(seed, config, {n.split("@")[0]: s for n, s in RUNS.items()}, None)
        known: dict[str, tuple[str, float, int, int, float]] = {}  # id -> src, loss, cx, nf, val
        grid: dict[str, tuple[str, float, int, int, int]] = {}
        accepted: list[str] = []
        per_gen = max(1, -(-(n_programs - 3) // max(generations, 1)))  # ceil
        counter = 0
        for g in range(generations + 1):
            rows: list = []
            ev_seq = llm_seq = 0
            proposals = ([("seed:" + n, [], None) for n in ("linear", "roofline", "phase")]
                         if g == 0 else [None] * max(0, min(per_gen, n_programs - counter)))
            for k, prop in enumerate(proposals):
                counter += 1
                if prop is None:
                    recent = accepted[-400:]  # parents from the recent past (fast at 10k)
                    parents = rng.sample(recent, min(len(recent), 2 if rng.random() < .2
                                                     else 1))
                    kind = "llm:mutate" if llm and rng.random() < 0.4 else rng.choice(
                        ["offline:add_term", "offline:swap_feature", "offline:crossover"
                         if len(parents) > 1 else "offline:scale"])
                    src = _child_source(known[parents[0]][0], counter, rng)
                else:
                    kind, parents, _ = prop
                    src = SEED_SOURCE.format(name=kind.split(":")[1]) + f"# variant {k}\n"
                rng.getrandbits(224)  # once the id's digits; drawn still, so the archive stays
                pid = source_id(src)  # ids are content hashes, checked by every reader
                base = min((known[q][1] for q in parents), default=0.6)
                cx = max(1, min(30, (max((known[q][2] for q in parents), default=3)
                                     + rng.choice([-2, -1, 1, 2, 3]))))
                nf = max(0, min(8, cx // 3 + rng.choice([-1, 0, 1])))
                if kind.startswith("llm"):
                    rows.append(_call(rid, g, llm_seq, src, rng))
                    llm_seq += 1
                if rng.random() < 0.12 and g > 0:  # a rejection: parse failure
                    pid = source_id(src + "(")
                    rows.append(ProgramRow(run_id=rid, id=pid, seq=k, source=src + "(",
                                           parent_ids=parents, operator=kind, generation=g))
                    rows.append(Evaluation(run_id=rid, generation=g, seq=ev_seq,
                                           program_id=pid, kind="screen", operator=kind,
                                           corpus_version="v0", status="rejected",
                                           reason="does not parse: unexpected EOF"))
                    ev_seq += 1
                    continue
                loss = base * math.exp(rng.gauss(-0.08, 0.25)) if parents else rng.uniform(.2, 1)
                metrics = _metrics(rng, loss)
                val = split_loss(metrics, "validate")
                known[pid] = (src, loss, cx, nf, val)
                accepted.append(pid)
                rows.append(ProgramRow(run_id=rid, id=pid, seq=k, source=src, parent_ids=parents,
                                       operator=kind, generation=g, complexity=cx,
                                       n_features=nf, fingerprint=pid[:16]))
                consts = {m: {"per_step_us": rng.uniform(50, 500), "per_req_us": rng.random()}
                          for m in MODELS}
                rows.append(Evaluation(run_id=rid, generation=g, seq=ev_seq, program_id=pid,
                                       kind="seed" if not parents else "child", operator=kind,
                                       corpus_version="v0", constants=consts, metrics=metrics,
                                       loss=loss, complexity=cx, n_evals=300,
                                       status="accepted", reason=""))
                ev_seq += 1
                col = next(j for j in range(len(EDGES) - 1) if EDGES[j] <= cx < EDGES[j + 1])
                cell = f"{col},{nf}"
                if cell not in grid or loss < grid[cell][1]:
                    grid[cell] = (pid, loss, cx, nf, g)
            rows += _grid_and_frontier(rid, g, grid, known)
            ar.commit_generation(rid, g, rows, status="running" if g < generations
                                 else "finished")
        if finals:
            _finals(ar, rid)
    return path


def _finals(ar: Archive, rid: int) -> None:
    """Closed-loop test figures of the last hall of fame: the stored test entries, with
    the errors halved and the final mode (what the run's end would have simulated)."""
    latest = ar.latest_accepted(rid)
    out = []
    for row in ar.frontier(rid):
        ev = latest[row.program_id]
        test = {n: {**m, "mode": final_scores.MODE,
                    "ape": {k: v / 2 for k, v in m["ape"].items()}}
                for n, m in ev.metrics.items() if m["split"] == "test"}
        out.append(final_scores.Final(row.program_id, row.generation,
                                      (ev.generation, ev.seq), test))
    final_scores.write(ar, rid, out, "2026-01-01T00:00:00+00:00")


def _call(rid: int, g: int, seq: int, src: str, rng: random.Random) -> LLMCall:
    return LLMCall(run_id=rid, generation=g, seq=seq, request_hash=f"{rng.getrandbits(256):064x}",
                   model="test-model", template_version="t1", prompt_tokens=900,
                   completion_tokens=300, cost_usd=0.0012, latency_s=1.5, status="ok",
                   reply=f"Here is a better program.\n\n```python\n{src}```\n", error="",
                   cached=False)


def _grid_and_frontier(rid: int, g: int, grid: dict, known: dict) -> list:
    rows: list = [GridCell(run_id=rid, generation=g, cell=c, program_id=e[0], loss=e[1],
                           complexity=e[2], n_features=e[3], elite_generation=e[4])
                  for c, e in sorted(grid.items())]
    hall: list[tuple[str, float, int]] = []  # the best of each complexity, as the search
    for pid, loss, cx, _nf, _g in sorted(grid.values(), key=lambda e: (e[2], e[1], e[0])):
        if not hall or cx != hall[-1][2]:
            hall.append((pid, loss, cx))
    limit = 1.5 * min(m[1] for m in hall)
    pick = min((m for m in hall if m[1] <= limit), key=lambda m: (known[m[0]][4], m[1]))
    rows += [FrontierRow(run_id=rid, generation=g, position=i, program_id=pid, loss=loss,
                         complexity=cx, picked=pid == pick[0])
             for i, (pid, loss, cx) in enumerate(hall)]
    return rows
