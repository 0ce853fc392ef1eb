"""Write the static site: every page of one run, each a self-contained HTML file.

Why static files and inline assets: the report must open from disk with the network off
(``file://``, no server, no CDN), be copied or attached as a directory, and diff cleanly
between regenerations. Each page inlines the same small stylesheet and script (a few KB)
rather than linking them, so any single page also works on its own.

Pages: ``index.html`` (overview), ``frontier.html``, ``lineage.html``, ``llm.html`` (LLM
runs), ``validation.html`` and ``p/<id16>.html`` per program. A page is rewritten only when
its bytes change, so ``--watch`` touches only what a generation changed. The folder is the
report's own (``outdir``: a marker lists what it wrote; nothing else is touched).

Everything shown comes from an archive, which is untrusted: jinja2 escapes every value in
text and attributes, the SVG builders escape theirs, every rendered value has the secrets
of its URLs masked (``evolve.text.untrusted``), and each page's content security policy allows
its one script by hash, so no inline handler (``onerror=``) or injected script can run.
"""

from __future__ import annotations

import base64
import hashlib
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import markupsafe

from evolve.report import charts, outdir
from evolve.report.data import RunData, load_run
from evolve.report.frontier import build_frontier
from evolve.report.highlight import diff_html, highlight_python
from evolve.report.lineage import build_lineage
from evolve.report.llmlog import VERDICTS, anchors_by_program, build_llm_log
from evolve.report.overview import build_overview
from evolve.report.pick import champion
from evolve.report.program import RUN_COLUMNS, build_program, displacements
from evolve.report.validation import WholeRuns, build_validation
from evolve.text.untrusted import mask_secrets

TEMPLATES = Path(__file__).parent / "templates"


@dataclass
class Options:
    """What ``evolve report`` was asked for, beyond the run."""

    cassette: str | None = None
    validate_dir: str | None = None
    validation: WholeRuns | None = None  # --validate: the pick simulated on every whole run


@dataclass
class Written:
    pages: int  # pages in the site
    changed: int  # pages whose bytes changed (written)
    generation: int | None


def _num(x: float | None, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return f"{x:.{digits}g}"


def _pct(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return "inf" if math.isinf(x) else f"{100.0 * x:.1f}%"


def _masked(value: Any) -> Any:
    """Every value a template prints, with its URLs' secrets masked (a run's stored
    configuration or an LLM error may name an endpoint or a database with a password)."""
    if isinstance(value, markupsafe.Markup):
        return markupsafe.Markup(mask_secrets(str(value)))
    return mask_secrets(value) if isinstance(value, str) else value


def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES),
                             autoescape=jinja2.select_autoescape(["jinja", "html"],
                                                                 default=True),
                             undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True,
                             finalize=_masked)
    env.filters.update(num=_num, pct=_pct, short=lambda s: (s or "-")[:12],
                       page=charts.page_name)
    return env


def _write(path: Path, text: str) -> bool:
    """Write ``text`` if it differs from the file's bytes; True if written."""
    data = text.encode("utf-8")
    try:
        if path.read_bytes() == data:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)  # a browser reloading mid-write sees the old or the new page
    return True


def script() -> tuple[str, str]:
    """The pages' one script and its CSP source (``'sha256-...'``): the policy allows that
    script and nothing else, no inline handler, no injected ``<script>``."""
    text = environment().get_template("script.js.jinja").render()
    digest = base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode()
    return text, f"'sha256-{digest}'"


def build_site(data: RunData, out: Path, opts: Options | None = None) -> Written:
    """Render every page of ``data`` into ``out`` (refused, before anything is written, if
    ``out`` is not empty and not an earlier report: ``outdir``)."""
    opts = opts or Options()
    env = environment()
    log = build_llm_log(data, opts.cassette)
    has_llm = bool(log) or data.config.get("operator", {}).get("kind") == "llm"
    js, js_hash = script()
    common = {"run": data.run, "has_llm": has_llm, "title": f"run {data.run.id}",
              "script": markupsafe.Markup(js), "script_hash": markupsafe.Markup(js_hash)}
    fixed = ["index.html", "frontier.html", "lineage.html", "validation.html"]
    planned = {*fixed, *(["llm.html"] if has_llm else []),
               *(charts.page_name(pid) for pid in data.programs)}
    earlier = outdir.claim(out, planned)
    changed = pages = 0

    def page(name: str, template: str, **ctx: Any) -> None:
        nonlocal changed, pages
        root = "../" if "/" in name else ""
        html = env.get_template(template).render(root=root, page=name, **common, **ctx)
        pages += 1
        changed += _write(out / name, html)

    ov = build_overview(data)
    page("index.html", "index.jinja", ov=ov, charts=charts.overview_charts(ov))
    fp = build_frontier(data)
    page("frontier.html", "frontier.jinja", fp=fp, charts=charts.frontier_charts(fp))
    lin = build_lineage(data)
    page("lineage.html", "lineage.jinja", lin=lin, svg=charts.lineage_svg(lin),
         programs=data.programs)
    if has_llm:
        page("llm.html", "llm.jinja", log=log, verdicts=[v for v in VERDICTS
                                                          if any(x.verdict == v for x in log)])
    vp = build_validation(data, opts.validate_dir, opts.validation)
    page("validation.html", "validation.jinja", vp=vp, charts=charts.validation_charts(vp))
    pick, champ = data.pick_id(), champion(data)
    front = data.frontier_ids()
    displaced = displacements(data)
    anchors = anchors_by_program(log)
    program_tpl = env.get_template("program.jinja")
    for pid in data.programs:
        pp = build_program(data, pid, pick, champ, front, displaced, anchors.get(pid))
        name = charts.page_name(pid)
        html = program_tpl.render(
            root="../", page=name, **common, pp=pp, source=highlight_python(pp.program.source),
            diffs=[(q, diff_html(d)) for q, d in pp.diffs], columns=RUN_COLUMNS)
        pages += 1
        changed += _write(out / name, html)
    # a reused --out: an earlier report's pages this one lacks (another run's programs,
    # found in review to stay reachable) go; what the report did not write stays
    outdir.finish(out, earlier, planned)
    return Written(pages, changed, data.last_generation)


def write_report(archive: str | Path, out: str | Path, run_id: int | None = None,
                 opts: Options | None = None) -> Written:
    """Open the archive read-only, load one run (default: the latest), write the site."""
    from evolve.archive import Archive

    with Archive(archive, create=False) as ar:
        data = load_run(ar, run_id)
    return build_site(data, Path(out), opts)


def watch(archive: str | Path, out: str | Path, run_id: int | None, opts: Options | None,
          interval_s: float, stop: Callable[[], bool],
          on_write: Callable[[Written], None] = lambda _w: None) -> Written | None:
    """Regenerate whenever the run commits a generation; return once the run is no longer
    ``running`` (after a last regeneration) or ``stop()`` is true.

    Why polling: the writer is another process (or thread) committing one transaction per
    generation; ``runs.generations_done`` and ``status`` change exactly then, so one cheap
    read per interval tells whether anything is new.
    """
    import time

    from evolve.archive import Archive

    last: tuple[int, str] | None = None
    written = None
    while True:
        with Archive(archive, create=False) as ar:
            rid = ar.latest_run_id() if run_id is None else run_id
            run = ar.run(rid)
            state = (run.generations_done, run.status)
            if state != last:
                written = build_site(load_run(ar, rid), Path(out), opts)
                on_write(written)
                last = state
        if run.status != "running" or stop():
            return written
        deadline = time.monotonic() + interval_s
        while time.monotonic() < deadline:
            if stop():
                break
            time.sleep(min(0.2, interval_s))


class LiveReport:
    """``evolve run --report DIR``: regenerate the report in a background thread while the
    search runs, and once more when it ends.

    Why a thread reading the archive (and not a hook in the loop): the search stays unaware
    of the report, and the thread sees exactly what a separate ``evolve report --watch``
    would, committed generations only. A failure to write the report is printed, never
    allowed to stop the search.
    """

    def __init__(self, archive: str | Path, run_id: int, out: str | Path,
                 interval_s: float = 2.0, opts: Options | None = None):
        import threading

        self.archive, self.run_id, self.out = archive, run_id, out
        self.interval_s, self.opts = interval_s, opts
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="evolve-report", daemon=True)

    def _loop(self) -> None:
        try:
            watch(self.archive, self.out, self.run_id, self.opts, self.interval_s,
                  self._stop.is_set)
        except Exception as exc:  # the report must never stop the search
            _warn(f"report: stopped updating ({type(exc).__name__}: {exc})")

    def __enter__(self) -> LiveReport:
        _warn(f"report: {Path(self.out) / 'index.html'} (regenerated every generation)")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        try:
            w = write_report(self.archive, self.out, self.run_id, self.opts)
            _warn(f"report: wrote {Path(self.out) / 'index.html'} (generation {w.generation})")
        except Exception as err:  # likewise
            _warn(f"report: not written ({type(err).__name__}: {err})")


def _warn(msg: str) -> None:
    import sys

    print(msg, file=sys.stderr, flush=True)
