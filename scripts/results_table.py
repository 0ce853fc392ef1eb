"""Markdown table for the README: an evolved program's closed-loop APEs next to baselines.

Usage: python scripts/results_table.py VALIDATE.json BASELINES.json
(``evolve validate ID --json`` and ``evolve baselines --json`` outputs).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def pct(m: dict, key: str) -> str:
    v = m["ape"].get(key)
    return "-" if v is None else f"{100 * v:.1f}"


def main() -> int:
    val = json.loads(Path(sys.argv[1]).read_text())
    base = json.loads(Path(sys.argv[2]).read_text())
    order = ("trained-physics", "roofline", "linear")
    print("| run | split | evolved E2E | TTFT | decode | p99 E2E | failed sim/meas | "
          + " | ".join(f"{b} E2E / TTFT" for b in order) + " |")
    print("|---|---|---|---|---|---|---|" + "---|" * len(order))
    for name, m in val["runs"].items():
        cells = [name[16:] if name[:8].isdigit() else name, m["split"], pct(m, "e2e_mean"),
                 pct(m, "ttft_mean"), pct(m, "itl_mean"), pct(m, "e2e_p99"),
                 f"{m['pred'].get('failures', 0):.0f}/{m['meas'].get('failures', 0):.0f}"]
        for b in order:
            bm = base[b][name]
            cells.append(f"{pct(bm, 'e2e_mean')} / {pct(bm, 'ttft_mean')}")
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
