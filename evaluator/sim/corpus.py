"""The batches one closed-loop simulation formed, as flat numpy arrays.

Per step: the batch statistics of ``glossary.STATS`` (``stats[N_STATS, n_steps]``) and
the closed-loop end time. Per request: arrival, the queueing delay the model added, the
wait from queue entry to the start of its admission step, admission / first-token / last
step, and whether it was aborted. Optionally the membership itself in CSR
form (``member_ptr``, ``member_req``, ``member_new``, ``member_kv``, ``member_prefill``) for
golden corpora (Go parity) and failure analysis; the full 16 runs hold ~60 M memberships, so
it is off by default.

A :class:`FitSet` is the documented fitting subsample: for every run and every load stage, a
contiguous window of steps from the middle of the stage (``window_steps``, at least four
request lifetimes), with the requests admitted and finished inside it. Features and the
measured means of the kept requests are precomputed: they do not depend on the program.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from evaluator.features.components import compute_features
from evaluator.scoring.score import wait_limit_us

MIN_FIT_REQUESTS = 50


@dataclass
class Corpus:
    stats: np.ndarray  # float64[N_STATS, n_steps]
    end_us: np.ndarray  # float64[n_steps]: closed-loop end time of each step
    arrival_us: np.ndarray  # float64[n_req]: measured arrival
    queue_us: np.ndarray  # float64[n_req]: queueing delay the model added before entry
    wait_us: np.ndarray  # float64[n_req]: queue entry -> start of admission step (>= 0)
    admit_step: np.ndarray  # int64[n_req]: first step scheduled in, -1 if never
    first_step: np.ndarray  # int64[n_req]: step that produced the first token, -1 if none
    last_step: np.ndarray  # int64[n_req]: step that produced the last token, -1 if none
    aborted: np.ndarray  # bool[n_req]: hit the client timeout
    output_tokens: np.ndarray  # int64[n_req]
    preemptions: np.ndarray  # int64[n_req]: times the request was preempted
    kv_used: np.ndarray  # int64[n_steps]: KV blocks allocated during the step
    member_ptr: np.ndarray | None = None  # int64[n_steps + 1]
    member_req: np.ndarray | None = None  # int32[n_members]
    member_new: np.ndarray | None = None  # int32[n_members]
    member_kv: np.ndarray | None = None  # int32[n_members]
    member_prefill: np.ndarray | None = None  # bool[n_members]
    member_len: np.ndarray | None = None  # int32[n_members]: prompt length s_i (input, or
    #                                       input + generated tokens when recomputing)

    @property
    def n_steps(self) -> int:
        return int(self.end_us.shape[0])

    def digest(self) -> str:
        """Content hash of the batches (not of the program's times)."""
        h = hashlib.sha256()
        for arr in (self.stats, self.admit_step, self.first_step,
                    self.last_step, self.aborted):
            h.update(np.ascontiguousarray(arr).tobytes())
        return h.hexdigest()[:16]

    def save(self, path: str | Path) -> None:
        arrays = {f.name: getattr(self, f.name) for f in fields(self)
                  if getattr(self, f.name) is not None}
        np.savez_compressed(path, **arrays)

    @classmethod
    def load(cls, path: str | Path) -> Corpus:
        with np.load(path) as z:
            return cls(**{k: z[k] for k in z.files})


@dataclass
class FitSet:
    """Windows of a corpus used for fast teacher-forced fitting (see module docstring)."""

    features: np.ndarray  # float64[N_FEATURES, n_win_steps] (windows concatenated)
    req_index: np.ndarray  # kept requests (original indices)
    admit_idx: np.ndarray  # their admission / first-token / last step, as indices into
    first_idx: np.ndarray  # the concatenated window arrays
    last_idx: np.ndarray
    wait_us: np.ndarray  # corpus wait after queue entry
    output_tokens: np.ndarray
    meas: dict[str, float]  # measured means over the kept requests


def build_fit_set(scenario, corpus: Corpus, window_steps: int = 2000,
                  measured: bool = True) -> FitSet:
    """One window per load stage (middle of the stage); precompute features and targets.

    ``measured=False``: a fit set that reads no measurement (its requests are every one the
    corpus completed, ``meas`` is empty), for targets that are another program's
    predictions (:mod:`evolve.fitting.calibrate`, a model nobody measured)."""
    n = corpus.n_steps
    step_start = np.concatenate([[0.0], corpus.end_us[:-1]])
    stage = scenario.stage_of(step_start)
    m = scenario.measured
    done = (corpus.last_step >= 0) & ~corpus.aborted & (corpus.first_step >= 0)
    ok = done.copy()
    if measured:
        ok &= ~m.failed & np.isfinite(m.e2e_s) & np.isfinite(m.ttft_s)
        ok &= corpus.wait_us <= wait_limit_us(m.ttft_s)
    if scenario.scored is not None:
        ok &= scenario.scored
    life = corpus.last_step[done] - corpus.admit_step[done]
    width = max(window_steps, 4 * int(np.median(life)) if life.size else 0)
    feats: list[np.ndarray] = []
    keep: list[np.ndarray] = []
    adm: list[np.ndarray] = []
    fst: list[np.ndarray] = []
    lst: list[np.ndarray] = []
    offset = 0
    for st in range(len(scenario.stages)):
        idx = np.flatnonzero(stage == st)
        if idx.size == 0:
            continue
        lo = max(int(idx[0]), int(idx[idx.size // 2]) - width // 2)
        hi = min(int(idx[-1]) + 1, lo + width, n)
        r = np.flatnonzero(ok & (corpus.admit_step >= lo) & (corpus.last_step < hi))
        if hi <= lo or r.size == 0:
            continue
        feats.append(compute_features(corpus.stats[:, lo:hi], scenario.arch_vector))
        keep.append(r)
        for dst, src in ((adm, corpus.admit_step), (fst, corpus.first_step),
                         (lst, corpus.last_step)):
            dst.append(src[r] - lo + offset)
        offset += hi - lo
    if sum(r.size for r in keep) < MIN_FIT_REQUESTS and ok.sum() > sum(r.size for r in keep):
        # Windows too sparse (e.g. an overloaded run): use the whole corpus instead.
        r = np.flatnonzero(ok)
        feats = [compute_features(corpus.stats, scenario.arch_vector)]
        keep, adm = [r], [corpus.admit_step[r]]
        fst, lst = [corpus.first_step[r]], [corpus.last_step[r]]
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64)  # noqa: E731
    req = cat(keep)
    out = scenario.output_tokens[req]
    meas = {}
    if req.size and measured:
        e2e, ttft = m.e2e_s[req], m.ttft_s[req]
        meas = {"e2e_mean": float(e2e.mean()), "ttft_mean": float(ttft.mean()),
                "itl_mean": float(np.mean((e2e - ttft) / np.maximum(out - 1, 1)))}
    return FitSet(
        features=(np.ascontiguousarray(np.concatenate(feats, axis=1)) if feats
                  else np.zeros((0, 0))),
        req_index=req, admit_idx=cat(adm), first_idx=cat(fst), last_idx=cat(lst),
        wait_us=corpus.wait_us[req], output_tokens=out, meas=meas)
