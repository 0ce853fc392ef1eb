"""Run configuration: one dataclass tree, loaded from TOML, every knob documented.

Why one tree: the whole configuration is stored with each run in the archive (as canonical
JSON), so a run can be resumed or replayed from the archive alone. Every field carries a
default and a one-line ``doc`` in its metadata; ``evolve run --print-config`` renders the
tree as commented TOML, so the documentation cannot drift from the code. Unknown keys and
wrong types fail with one line naming the file and the dotted key, because a silently
ignored typo ("childrens = 32") would waste a long run.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evolve.errors import ConfigError

try:  # the LLM colleague owns this section's fields
    from evolve.config.llm import LLMConfig
except ImportError:  # pragma: no cover - placeholder until evolve/config/llm.py lands

    @dataclass
    class LLMConfig:  # type: ignore[no-redef]
        """Placeholder LLM section (the real one lives in evolve/config/llm.py)."""

        model: str = field(default="", metadata={"doc": "model name at the endpoint"})
        base_url: str = field(default="", metadata={"doc": "OpenAI-compatible base URL"})

# MAP-Elites complexity bin edges (evolve.search.grid): bins of three AST nodes up to 31.
DEFAULT_COMPLEXITY_EDGES: tuple[int, ...] = (1, 4, 7, 10, 13, 16, 19, 22, 25, 28, 31)


# Keys added after runs were first stored, with the value that reproduces what runs stored
# without them did (see Config.from_dict).
BEFORE_KEY: dict[tuple[str, str], Any] = {("fit", "starts"): 1,
                                          ("fit", "transfer_weight"): 0.0,
                                          ("operator", "llm_share"): 1.0,
                                          ("operator", "repairs"): 0,
                                          ("operator", "overlap"): False,
                                          ("operator", "lookahead"): 1,
                                          ("llm", "replies_per_prompt"): 1,
                                          ("run", "step_noise"): 0.0,
                                          ("loss", "ttft_p90_steady"): 0.0,
                                          ("loss", "ttft_p99_steady"): 0.0,
                                          ("loss", "e2e_p99_steady"): 0.0}
# [operator] keys of the LLM operator (issue 59): an offline run does not store them, so it
# stores the configuration (and archive digest) it stored before they existed
OPERATOR_LLM_KEYS = ("llm_share", "repairs", "overlap", "lookahead")
# [llm] keys added after archives existed that an offline run does not store (the same
# reason); an LLM run stores them always, so a run stored before one loads as it ran
LLM_RUN_KEYS = ("replies_per_prompt",)
SEED_LIMIT = 2**63  # run seeds are in [0, SEED_LIMIT): an archive stores one as 64-bit
# how fast and where, not what is found: left out of the stored config (so runs compare)
NOT_STORED = ("archive", "workers", "force_workers", "progress", "executor", "ray_address")
# run keys stored only when set off their default, so runs that do not use them store the
# configuration (and archive digest) they stored before the key existed
RUN_STORED_WHEN_SET: dict[str, Any] = {"loop": "vllm"}
# evaluator.api.LOOPS (tests/evolve/config/test_config.py keeps them equal)
ENGINE_LOOPS = ("vllm", "blis")
# [llm] keys added after archives existed (issue 16): stored only when set, so a run that
# does not use them stores the same configuration (and archive digest) as before.
LLM_STORED_WHEN_SET: dict[str, Any] = {"constrain": "off", "prompt_profile": "auto",
                                       "context_tokens": None, "gguf": None,
                                       "reply_form": "auto"}


def _doc(default: Any, doc: str, **extra: Any) -> Any:
    """A dataclass field with a default and its one-line documentation."""
    return field(default=default, metadata={"doc": doc, **extra})


@dataclass
class RunSection:
    """What to run on, how long, and where to store it."""

    seed: int = _doc(0, "run seed: every random stream of the run derives from it")
    generations: int = _doc(100, "generations after the seed generation (0)")
    data: str = _doc("", "data directory; empty = $EVOLVE_DATA or ../shared/data")
    scenarios: list[str] = field(default_factory=list, metadata={
        "doc": "experiment names to load; empty = all"})
    head_seconds: float = _doc(
        0.0, "cut every run to the requests of its first N seconds (tests, demos); 0 = full")
    prompt_cache: bool = _doc(True, "simulate vLLM's prefix caching of whole repeated "
                              "prompts (inferred from the input lengths; "
                              "evaluator/data/prompt_cache.py); false = the shared "
                              "system prompts only")
    async_scheduling: bool = _doc(True, "simulate vLLM's async scheduling (default since "
                                  "vLLM 0.14): a busy engine forms each step as the previous "
                                  "one begins, so a request arriving meanwhile waits a step "
                                  "longer (evaluator/sim/simulator.py); false = form each step "
                                  "when the previous one ends")
    loop: str = _doc(
        "vllm", "engine loop the constants are fitted in: vllm (v0.15.1, where the runs were "
        "measured) | blis (BLIS at the pinned commit, where an exported model runs: no async "
        "scheduling, TTFT + output_token_us, re-decode after preemption; docs/blis.md)",
        choices=ENGINE_LOOPS)
    step_noise: float = _doc(
        0.06, "sd of log of a seeded, mean-one, iid multiplicative noise on every simulated "
        "step time (the stream seeded by the run's name; evaluator/sim/simulator.py); 0.06 = "
        "the median measured on the train runs' sampled steps; 0 = none")
    archive: str = _doc("archive.db", "archive: SQLite file path or SQLAlchemy URL, e.g. "
                        "postgresql://user@host/db (not stored with the run)")
    seeds_dir: str = _doc("", "directory of seed programs *.py; empty = the project's seeds/")
    wall_time_s: float = _doc(
        0.0, "stop after the first complete generation past this many seconds; 0 = no limit")
    max_evaluations: int = _doc(0, "stop once this many children were fitted; 0 = no limit")
    workers: int = _doc(2, "processes fitting children in parallel (1 = in process); at most "
                        "this machine's CPUs (at least 2) unless force_workers or executor ray")
    force_workers: bool = _doc(False, "allow more workers than this machine has CPUs")
    progress: bool = _doc(True, "show a progress bar on stderr")
    executor: str = _doc(
        "local", "where children are fitted: local (forked processes) | ray (Ray tasks; "
        "the ray extra)", choices=("local", "ray"))
    ray_address: str = _doc(
        "", "executor ray: cluster address (host:port); empty = start a local Ray instance "
        "with `workers` CPUs")


@dataclass
class SearchSection:
    """The generation loop: selection, grid, duplicate rejection, corpus refresh."""

    children: int = _doc(8, "children proposed per generation (K)")
    parents_per_child: int = _doc(2, "parents drawn by NSGA-II tournament for each child")
    inspirations: int = _doc(2, "frontier programs shown to the operator as inspirations")
    complexity_edges: list[int] = field(
        default_factory=lambda: list(DEFAULT_COMPLEXITY_EDGES),
        metadata={"doc": "MAP-Elites complexity bin edges (bin j = [e_j, e_j+1))"})
    pick_tolerance: float = _doc(
        1.5, "frontier pick considers members with loss <= this x the lowest frontier loss")
    physics: str = _doc(
        "reject", "physics check of every fitted program on synthetic batches (positive, "
        "non-decreasing in context and tokens, no faster than the hardware floor at long "
        "contexts): reject | off", choices=("reject", "off"))
    pick_rule: str = _doc(
        "validate", "frontier pick: validate (lowest validate loss among eligible members) "
        "| pysr (PySR's score rule, training loss only)", choices=("validate", "pysr"))
    complexity_cap: int = _doc(30, "children above this complexity are rejected")
    dedup_fingerprint: bool = _doc(
        True, "reject children whose predictions at initial constants equal an earlier one's")
    fingerprint_digits: int = _doc(9, "significant digits of the prediction fingerprint")
    refresh_margin: float = _doc(
        0.1, "re-simulate corpora when the champion's train loss improved by this fraction")
    refresh_min_gap: int = _doc(5, "at least this many generations between corpus refreshes")
    max_refreshes: int = _doc(8, "corpus refreshes after generation 0; 0 = never refresh")
    refresh_gate: bool = _doc(
        True, "keep new corpora only if the champion's closed-loop train loss beats the "
        "current corpora's producer")
    bootstrap_seed: str = _doc(
        "linear", "seed file stem whose initial constants simulate the first corpus (a "
        "stable one: its batches train every seed's first fit); empty or absent = first")


@dataclass
class FitSection:
    """Constant fitting (CMA-ES) of every accepted child on the training runs."""

    scope: str = _doc("pooled", "constant scope: global | per_model | per_scenario | "
                      "pooled (per model, shrunk towards one global set; held-out models "
                      "get the global set)",
                      choices=("global", "per_model", "per_scenario", "pooled"))
    pool_strength: float = _doc(
        0.5, "pooled scope: penalty per unit-box squared distance from the global set, "
        "divided by the model's training runs")
    prior_strength: float = _doc(
        1.0, "penalty per unit-box squared distance of a group's constants from the "
        "program's declared initial values (a prior: seeds declare published coefficients),"
        " divided by the group's training runs; 0 = off")
    transfer_weight: float = _doc(
        0.0, "search loss = sqrt(train^2 + w * max(0, transfer - margin)^2), transfer = "
        "training loss of each model's training runs under constants fitted without that "
        "model (evolve/search/transfer.py); 0 = off")
    transfer_margin: float = _doc(
        0.0, "transfer loss below which transfer costs nothing (with transfer_weight > 0)")
    max_evals: int = _doc(300, "loss evaluations per fit (all restarts together)")
    restarts: int = _doc(1, "CMA-ES restarts when a fit fails")
    starts: int = _doc(3, "teacher-forced fits per program from independent CMA-ES streams, "
                       "each judged closed loop; the lowest training loss is kept")
    window_steps: int = _doc(2000, "steps per load stage in the fitting windows")
    fitness: str = _doc("closed_loop", "how fitted programs are judged: closed_loop (stage "
                        "slices simulated) | teacher_forced (fitting windows)",
                        choices=("closed_loop", "teacher_forced"))
    slice_seconds: float = _doc(120.0, "closed-loop fitness: seconds per stage slice")
    slice_warmup_seconds: float = _doc(30.0, "closed-loop fitness: unscored warm-up per slice")
    seed_polish_evals: int = _doc(40, "generation 0: closed-loop CMA-ES simulations per "
                                  "constant group refitting each seed; 0 = off")
    polish_evals: int = _doc(150, "last generation: closed-loop CMA-ES simulations per constant "
                             "group refitting the pick and the champion; 0 = off")


@dataclass
class SplitSection:
    """Which runs train, validate and test."""

    mode: str = _doc(
        "data", "data (the experiments' split field) | lomo:<model> | lowo:<workload>")


@dataclass
class OperatorSection:
    """Who proposes children (the LLM endpoint, cassette and budgets are in [llm])."""

    kind: str = _doc("offline", "offline (AST mutations) | llm", choices=("offline", "llm"))
    llm_share: float = _doc(
        0.25, "kind llm: share of each generation's children asked of the LLM, the rest "
        "made by the offline operator (drawn per child from the run seed; 1 = LLM only; "
        "docs/llm.md says how 0.25 was chosen)")
    repairs: int = _doc(
        2, "kind llm: offline repair edits tried on an LLM child that fails the physics "
        "probe or the fit (add a context term, a memory floor), each its own child; 0 = off")
    overlap: bool = _doc(
        True, "kind llm: send generation g+1's LLM requests (planned from generation g's "
        "parents) while generation g fits and judges")
    lookahead: int = _doc(
        1, "kind llm with overlap: generations whose LLM requests are in flight while one "
        "fits (1: the next, planned from the current generation's parents; 2: the next "
        "two, planned up to two generations behind the selection, which the LLM's programs "
        "rarely survive; docs/llm.md)")


@dataclass
class LossSection:
    """Search loss per run: weighted mean of squared APEs, means at 1, steady percentiles as set.

    Steady: over requests arriving after the measured server's 30 s cold start, both sides
    (evaluator/scoring/score.py, docs/concepts/simulator.md)."""

    ttft_p90_steady: float = _doc(0.5, "weight of the steady p90 TTFT APE (0 = off)")
    ttft_p99_steady: float = _doc(0.25, "weight of the steady p99 TTFT APE, the noisiest "
                                  "statistic (0 = off)")
    e2e_p99_steady: float = _doc(0.5, "weight of the steady p99 E2E APE (0 = off)")
    cap: float = _doc(1.0, "each percentile APE counts at most this much (a knee's +100 % "
                      "does not drown the means)")

    def weights(self) -> dict[str, float]:
        """As ``evaluator.api.with_sim_options`` takes them."""
        return {"ttft_p90_steady": self.ttft_p90_steady,
                "ttft_p99_steady": self.ttft_p99_steady,
                "e2e_p99_steady": self.e2e_p99_steady, "cap": self.cap}


@dataclass
class Config:
    """The whole configuration of one run."""

    run: RunSection = field(default_factory=RunSection)
    search: SearchSection = field(default_factory=SearchSection)
    fit: FitSection = field(default_factory=FitSection)
    loss: LossSection = field(default_factory=LossSection)
    split: SplitSection = field(default_factory=SplitSection)
    operator: OperatorSection = field(default_factory=OperatorSection)
    llm: LLMConfig = field(default_factory=LLMConfig)

    # ---- (de)serialisation -------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def stored_dict(self) -> dict[str, Any]:
        """What is stored with a run: everything that can change its results.

        Left out: the archive path (it is the file itself), and the knobs that only change
        speed, place or display (workers, executor, progress), so two equal runs store equal
        configs.
        """
        d = self.to_dict()
        for key in NOT_STORED:
            del d["run"][key]
        for key, default in RUN_STORED_WHEN_SET.items():
            if d["run"].get(key) == default:
                del d["run"][key]
        for key, default in LLM_STORED_WHEN_SET.items():
            if d["llm"].get(key) == default:
                del d["llm"][key]
        if d["operator"]["kind"] != "llm":
            for key in OPERATOR_LLM_KEYS:
                del d["operator"][key]
            for key in LLM_RUN_KEYS:
                del d["llm"][key]
        if d["fit"]["transfer_weight"] == 0:  # off: stored as before the keys existed
            del d["fit"]["transfer_weight"], d["fit"]["transfer_margin"]
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<config>") -> Config:
        """A stored config (``evolve replay``, ``--resume``). A key it lacks takes the value
        that reproduces the behaviour of the code that stored it (:data:`BEFORE_KEY`), not
        today's default: an archive must replay the same after a default changes."""
        cfg = cls()
        for (section, key), value in BEFORE_KEY.items():
            if key not in (data.get(section) or {}):
                setattr(getattr(cfg, section), key, value)
        apply_dict(cfg, data, source)
        return validate(cfg, source)


# ---- validation ---------------------------------------------------------------------------
def cpu_count() -> int:
    """CPUs this process may use (its affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _type_ok(value: Any, tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if tp is Any:
        return True
    if origin is typing.Literal:
        return value in typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, a) for a in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if origin is tuple and len(typing.get_args(tp)) >= 2 and ... not in typing.get_args(tp):
        args = typing.get_args(tp)
        return isinstance(value, (list, tuple)) and len(value) == len(args) and all(
            _type_ok(v, a) for v, a in zip(value, args, strict=True))
    if origin in (list, tuple) or tp in (list, tuple):
        args = typing.get_args(tp)
        return isinstance(value, (list, tuple)) and (
            not args or all(_type_ok(v, args[0]) for v in value))
    if origin is dict or tp is dict:
        args = typing.get_args(tp)
        return isinstance(value, dict) and (
            not args or all(_type_ok(k, args[0]) and _type_ok(v, args[1])
                            for k, v in value.items()))
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True


def _type_name(tp: Any) -> str:  # dict[str, float], not the bare "dict" that hid what was wrong
    return (None if typing.get_args(tp) else getattr(tp, "__name__", None)) or str(tp).replace(
        "typing.", "")


def apply_dict(obj: Any, data: dict[str, Any], source: str, prefix: str = "") -> None:
    """Set ``obj``'s fields from ``data`` recursively, rejecting unknown keys and bad types."""
    hints = typing.get_type_hints(type(obj))
    fields_ = {f.name: f for f in dataclasses.fields(obj)}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if key not in fields_:
            raise ConfigError(f"{source}: unknown key '{dotted}'")
        tp = hints[key]
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise ConfigError(f"{source}: key '{dotted}' must be a table")
            apply_dict(current, value, source, dotted + ".")
            continue
        if not _type_ok(value, tp):
            raise ConfigError(f"{source}: key '{dotted}' expects {_type_name(tp)}, "
                              f"got {type(value).__name__} {value!r}")
        if tp is float and isinstance(value, int):
            value = float(value)
        if isinstance(current, tuple) and isinstance(value, list):
            value = tuple(value)
        choices = fields_[key].metadata.get("choices")
        if choices and value not in choices:
            raise ConfigError(f"{source}: key '{dotted}' must be one of "
                              f"{', '.join(choices)}; got {value!r}")
        setattr(obj, key, value)


def validate(cfg: Config, source: str = "<config>") -> Config:
    """Cross-field checks that types alone do not catch."""
    fin = math.isfinite
    ranges = {  # key: (in range, the allowed range in words)
        "run.seed": (0 <= cfg.run.seed < SEED_LIMIT, "an integer in [0, 2^63)"),
        "fit.slice_seconds": (fin(cfg.fit.slice_seconds) and cfg.fit.slice_seconds > 0,
                              "a finite number > 0")}
    for key in ("run.wall_time_s", "run.head_seconds", "fit.slice_warmup_seconds",
                "run.step_noise", "loss.ttft_p90_steady", "loss.ttft_p99_steady",
                "loss.e2e_p99_steady",
                "fit.pool_strength", "fit.prior_strength", "fit.transfer_weight",
                "fit.transfer_margin", "run.max_evaluations", "search.inspirations",
                "search.refresh_min_gap", "search.max_refreshes", "search.refresh_margin",
                "fit.restarts",
                "fit.seed_polish_evals", "fit.polish_evals"):  # budgets and counts: 0 = off
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        whole = isinstance(value, int)  # no isfinite: an int past a float's range overflows
        ranges[key] = (value >= 0 if whole else fin(value) and value >= 0,
                       "an integer >= 0" if whole else "a finite number >= 0")
    cpus = max(2, cpu_count())  # the default (2) is valid everywhere
    forced = cfg.run.force_workers or cfg.run.executor == "ray"  # Ray: its own CPU count
    edges = cfg.search.complexity_edges
    ranges |= {
        "run.workers": (1 <= cfg.run.workers <= (10_000 if forced else cpus),
                        "an integer in [1, 10000]" if forced else f"an integer in [1, {cpus}] "
                        "(this machine's CPUs; --force-workers or run.force_workers = true "
                        "to exceed it)"),
        "run.generations": (cfg.run.generations >= 0, "an integer >= 0"),
        "search.children": (cfg.search.children >= 1, "an integer >= 1"),
        "search.parents_per_child": (cfg.search.parents_per_child >= 1, "an integer >= 1"),
        "search.complexity_edges": (len(edges) >= 2 and edges[0] >= 0 and all(
            b > a for a, b in itertools.pairwise(edges)),
            "at least two strictly increasing numbers >= 0 (a complexity is at least 1)"),
        "search.pick_tolerance": (fin(cfg.search.pick_tolerance)
                                  and cfg.search.pick_tolerance >= 1.0, "a finite number >= 1"),
        "search.complexity_cap": (cfg.search.complexity_cap >= 1, "an integer >= 1"),
        "search.fingerprint_digits": (1 <= cfg.search.fingerprint_digits <= 17,
                                      "an integer in [1, 17]"),
        "fit.max_evals": (cfg.fit.max_evals >= 1, "an integer >= 1"),
        "loss.cap": (fin(cfg.loss.cap) and cfg.loss.cap > 0, "a finite number > 0"),
        "fit.starts": (cfg.fit.starts >= 1, "an integer >= 1"),
        "operator.llm_share": (fin(cfg.operator.llm_share)
                               and 0.0 <= cfg.operator.llm_share <= 1.0, "a number in [0, 1]"),
        "operator.repairs": (0 <= cfg.operator.repairs <= 3, "an integer in [0, 3]"),
        "operator.lookahead": (1 <= cfg.operator.lookahead <= 4, "an integer in [1, 4]"),
        "fit.window_steps": (cfg.fit.window_steps >= 1, "an integer >= 1")}
    for key, (ok, allowed) in ranges.items():
        if not ok:
            raise ConfigError(f"{source}: key '{key}' out of range: must be {allowed}")
    if not re.fullmatch(r"data|lomo:.+|lowo:.+", cfg.split.mode):
        raise ConfigError(f"{source}: key 'split.mode' must be data, lomo:<model> or "
                          f"lowo:<workload>; got {cfg.split.mode!r}")
    try:  # re-run the LLM section's own checks (and its normalisation of prices)
        cfg.llm = type(cfg.llm)(**{f.name: getattr(cfg.llm, f.name)
                                   for f in dataclasses.fields(cfg.llm)})
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: section 'llm': {exc}") from None
    return cfg


def load_config(path: str | Path | None = None) -> Config:
    """Defaults, overridden by the TOML file at ``path`` (if any)."""
    cfg = Config()
    if path is None:
        return cfg
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{p}: config file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{p}: is a directory, not a config file") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read the config file ({exc.strerror})") from None
    if raw.startswith(b"\xef\xbb\xbf"):  # as some editors save: the parser's message misleads
        raise ConfigError(f"{p}: starts with a UTF-8 byte-order mark, which TOML does not "
                          "allow; save the file without one")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not valid TOML (not UTF-8 text: byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: not valid TOML ({exc})") from None
    except (ValueError, RecursionError) as exc:  # a 5,000-digit integer, nesting too deep
        raise ConfigError(f"{p}: not a config TOML can hold ({type(exc).__name__}: "
                          f"{str(exc)[:120]})") from None
    apply_dict(cfg, data, str(p))
    return validate(cfg, str(p))
