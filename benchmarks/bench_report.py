"""`evolve report` on an archive of 10,000 programs: generation time, size, and how long
each page takes to open in headless Chromium (target: under 2 s).

The archive is synthetic (tests/support/report_synthetic.py: the loop's row conventions,
five runs of metrics per evaluation, 40 % LLM children), written through the real Archive.
"Opens" = navigation start to the load event (``performance.timing``), plus the first
paint after it, from ``file://`` with the network refused; each page is opened three
times and the median printed. Needs Chromium and Playwright (scripts/ci_setup_browser.sh);
without them only the generation figures are printed.

    python benchmarks/bench_report.py [--programs N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "report"))
sys.path.insert(0, str(ROOT))

from report_synthetic import make_archive  # noqa: E402

from evolve.report import write_report  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage"]
PAGES = ("index.html", "frontier.html", "lineage.html", "llm.html", "validation.html")


def open_times(out: Path, pages: list[str]) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    times: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, args=ARGS, headless=True,
            viewport={"width": 1280, "height": 900})
        ctx.route("**/*", lambda r: r.continue_() if r.request.url.startswith(
            ("file:", "data:")) else r.abort())
        page = ctx.new_page()
        for name in pages:
            runs = []
            for _ in range(3):
                page.goto("about:blank")
                page.goto((out / name).as_uri(), wait_until="load")
                # one animation frame after load: layout and paint of the SVG are done
                page.evaluate("() => new Promise(r => requestAnimationFrame(() => r()))")
                runs.append(page.evaluate("() => performance.now() / 1000"))
            times[name] = statistics.median(runs)
        ctx.close()
    return times


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--programs", type=int, default=10_000)
    ap.add_argument("--generations", type=int, default=100)
    ap.add_argument("--keep", metavar="DIR", help="write archive and report here")
    args = ap.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_report_"))
    work.mkdir(parents=True, exist_ok=True)
    db = work / "bench.db"
    db.unlink(missing_ok=True)
    t = time.perf_counter()
    make_archive(db, n_programs=args.programs, generations=args.generations, seed=3)
    t_arch = time.perf_counter() - t
    t = time.perf_counter()
    w = write_report(db, work / "report")
    t_rep = time.perf_counter() - t
    out = work / "report"
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"archive: {args.programs} programs, {args.generations} generations, "
          f"{db.stat().st_size / 1e6:.0f} MB, written in {t_arch:.1f} s")
    print(f"evolve report: {w.pages} pages, {size / 1e6:.0f} MB, {t_rep:.1f} s")
    t = time.perf_counter()
    w2 = write_report(db, out)
    print(f"regenerate (nothing changed): {time.perf_counter() - t:.1f} s, "
          f"{w2.changed} pages written")
    if not Path(CHROMIUM).exists():
        print("no Chromium: page open times skipped (scripts/ci_setup_browser.sh)")
        return 0
    try:
        prog = sorted((out / "p").glob("*.html"))[len(list((out / "p").glob("*.html"))) // 2]
        times = open_times(out, [*PAGES, f"p/{prog.name}"])
    except ImportError:
        print("no playwright: page open times skipped (pip install -e '.[report]')")
        return 0
    for name, s in times.items():
        kb = (out / name).stat().st_size / 1e3
        print(f"open {name:<28} {s:6.2f} s  ({kb:,.0f} kB){'  OVER 2 s' if s >= 2 else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
