"""The batches one closed-loop simulation formed, as flat numpy arrays.

Per step: the batch statistics of ``glossary.STATS`` (``stats[N_STATS, n_steps]``), the
*gate* (the latest arrival among requests first scheduled in that step: a step cannot start
before it) and the closed-loop end time. Per request: effective arrival, admission /
first-token / last step, and whether it was aborted. Optionally the membership itself in CSR
form (``member_ptr``, ``member_req``, ``member_new``, ``member_kv``, ``member_prefill``) for
golden corpora (Go parity) and failure analysis; the full 16 runs hold ~60 M memberships, so
it is off by default.

A :class:`FitSet` is the documented fitting subsample: for every run and every load stage, a
contiguous window of ``window_steps`` steps from the middle of the stage, anchored at the
closed-loop time its first step started, with the requests admitted and finished inside it.
Features are precomputed because they do not depend on the program.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from evaluator.components import compute_features


@dataclass
class Corpus:
    stats: np.ndarray  # float64[N_STATS, n_steps]
    gate_us: np.ndarray  # float64[n_steps]; -inf where no request was first scheduled
    end_us: np.ndarray  # float64[n_steps]: closed-loop end time of each step
    arrival_us: np.ndarray  # float64[n_req]: arrival + queueing delay
    admit_step: np.ndarray  # int64[n_req]: first step scheduled in, -1 if never
    first_step: np.ndarray  # int64[n_req]: step that produced the first token, -1 if none
    last_step: np.ndarray  # int64[n_req]: step that produced the last token, -1 if none
    aborted: np.ndarray  # bool[n_req]: hit the client timeout
    output_tokens: np.ndarray  # int64[n_req]
    member_ptr: np.ndarray | None = None  # int64[n_steps + 1]
    member_req: np.ndarray | None = None  # int32[n_members]
    member_new: np.ndarray | None = None  # int32[n_members]
    member_kv: np.ndarray | None = None  # int32[n_members]
    member_prefill: np.ndarray | None = None  # bool[n_members]

    @property
    def n_steps(self) -> int:
        return int(self.end_us.shape[0])

    def digest(self) -> str:
        """Content hash of the batches (not of the program's times)."""
        h = hashlib.sha256()
        for arr in (self.stats, self.gate_us, self.admit_step, self.first_step,
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
    gate_us: np.ndarray  # float64[n_win_steps]
    seg_start: np.ndarray  # int64[n_windows]: first index of each window in the arrays above
    anchor_us: np.ndarray  # float64[n_windows]: closed-loop start time of each window
    arrival_us: np.ndarray  # requests kept
    first_idx: np.ndarray  # index into the window arrays of their first-token step
    last_idx: np.ndarray
    output_tokens: np.ndarray
    req_index: np.ndarray  # original request indices kept (for measured targets)


def build_fit_set(scenario, corpus: Corpus, window_steps: int = 2000) -> FitSet:
    """Pick one window per load stage (middle of the stage) and precompute its features."""
    n = corpus.n_steps
    step_start = np.concatenate([[0.0], corpus.end_us[:-1]])
    stage = scenario.stage_of(step_start)
    feats, gates, seg, anchors = [], [], [], []
    keep_req, first_idx, last_idx = [], [], []
    offset = 0
    ok = (corpus.last_step >= 0) & ~corpus.aborted & (corpus.first_step >= 0)
    for st in range(len(scenario.stages)):
        idx = np.flatnonzero(stage == st)
        if idx.size == 0:
            continue
        mid = idx[idx.size // 2]
        lo = max(int(idx[0]), mid - window_steps // 2)
        hi = min(int(idx[-1]) + 1, lo + window_steps, n)
        if lo >= hi:
            continue
        sel = ok & (corpus.admit_step >= lo) & (corpus.last_step < hi)
        r = np.flatnonzero(sel)
        feats.append(compute_features(corpus.stats[:, lo:hi], scenario.arch_vector))
        gates.append(corpus.gate_us[lo:hi])
        seg.append(offset)
        anchors.append(step_start[lo])
        keep_req.append(r)
        first_idx.append(corpus.first_step[r] - lo + offset)
        last_idx.append(corpus.last_step[r] - lo + offset)
        offset += hi - lo
    cat = lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt)  # noqa: E731
    req = cat(keep_req, np.int64)
    return FitSet(
        features=np.ascontiguousarray(np.concatenate(feats, axis=1)) if feats else
        np.zeros((0, 0)), gate_us=cat(gates, np.float64), seg_start=np.array(seg, np.int64),
        anchor_us=np.array(anchors, np.float64), arrival_us=corpus.arrival_us[req],
        first_idx=cat(first_idx, np.int64), last_idx=cat(last_idx, np.int64),
        output_tokens=corpus.output_tokens[req], req_index=req)
