"""Go text of the measured-kernel features: the interpolation and the embedded curves.

Why a module of its own: the interpolation mirrors ``evaluator/features/kernel_interp.py`` line by
line (change the two together; the parity test fails otherwise), and the curves are data
that the export embeds per model, so a BLIS user needs neither the microbenchmark tables
nor evolve to run the exported model. A model without embedded curves (a model the
program was not fitted on) gets the roofline fallback, exactly as in
``evaluator/features/components.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from evolve.export.go.expr import go_float

KERNEL_FUNCS = '''
// $tInterpLogLog is evaluator/features/kernel_interp.py interp_loglog: piecewise linear in
// (log x, log y); below the table flat or along the first segment, above it with the
// physical exponent.
func $tInterpLogLog(x, y []float64, v float64, belowSlope bool, aboveExp float64) float64 {
	n := len(x)
	if v <= 0.0 {
		return 0.0
	}
	if v >= x[n-1] {
		return y[n-1] * math.Pow(v/x[n-1], aboveExp)
	}
	if v <= x[0] {
		if !belowSlope {
			return y[0]
		}
		p := math.Log(y[1]/y[0]) / math.Log(x[1]/x[0])
		return y[0] * math.Pow(v/x[0], p)
	}
	j := 0
	for x[j+1] < v {
		j++
	}
	w := math.Log(v/x[j]) / math.Log(x[j+1]/x[j])
	return math.Exp(math.Log(y[j]) + w*math.Log(y[j+1]/y[j]))
}

// $tSegment is the index of the grid segment holding v (the edge one outside the grid).
func $tSegment(x []float64, v float64) int {
	n := len(x)
	if v <= x[0] {
		return 0
	}
	if v >= x[n-1] {
		return n - 2
	}
	j := 0
	for x[j+1] < v {
		j++
	}
	return j
}

// $tBilinear is evaluator/features/kernel_interp.py bilinear: decode attention over (batch size,
// KV length), linear in both, never below the grid's smallest value.
func $tBilinear(bx, lx, t []float64, b, ell float64) float64 {
	nl := len(lx)
	i := $tSegment(bx, b)
	j := $tSegment(lx, ell)
	wb := (b - bx[i]) / (bx[i+1] - bx[i])
	wl := (ell - lx[j]) / (lx[j+1] - lx[j])
	t00 := t[i*nl+j]
	t01 := t[i*nl+j+1]
	t10 := t[(i+1)*nl+j]
	t11 := t[(i+1)*nl+j+1]
	out := (1.0-wb)*((1.0-wl)*t00+wl*t01) + wb*((1.0-wl)*t10+wl*t11)
	lo := t[0] // the grid is non-decreasing in both axes: its first cell is its minimum
	if out > lo {
		return out
	}
	return lo
}

// $tKernelTimes is evaluator/features/kernel_interp.py kernel_times: (GEMM, decode attention,
// prefill attention) in microseconds from the packed block kb.
func $tKernelTimes(kb []float64, tokens, bs, nDc, dcCtx, pfPairs, layers, nExp,
	topk float64) (float64, float64, float64) {
	nm := int(kb[1])
	nb := int(kb[2])
	nl := int(kb[3])
	ns := int(kb[4])
	o := 5
	m := kb[o : o+nm]
	gDense := kb[o+nm : o+2*nm]
	gExp := kb[o+2*nm : o+3*nm]
	gLm := kb[o+3*nm : o+4*nm]
	o += 4 * nm
	bx := kb[o : o+nb]
	lx := kb[o+nb : o+nb+nl]
	dt := kb[o+nb+nl : o+nb+nl+nb*nl]
	o += nb + nl + nb*nl
	sx := kb[o : o+ns]
	pt := kb[o+ns : o+2*ns]
	gemm := 0.0
	if tokens > 0.0 {
		gemm = $tInterpLogLog(m, gDense, tokens, false, 1.0)
		gemm += $tInterpLogLog(m, gLm, bs, false, 1.0)
		if nExp > 1.0 {
			touched := nExp * (1.0 - math.Pow(1.0-topk/nExp, tokens))
			gemm += touched * $tInterpLogLog(m, gExp, tokens*topk/touched, false, 1.0)
		}
	}
	dc := 0.0
	if nDc > 0.0 {
		dc = layers * $tBilinear(bx, lx, dt, nDc, dcCtx/nDc)
	}
	pf := 0.0
	if pfPairs > 0.0 {
		pf = layers * $tInterpLogLog(sx, pt, math.Sqrt(2.0*pfPairs), true, 2.0)
	}
	return gemm, dc, pf
}
'''



def kernels_lookup(low: str, kernels: Mapping[str, tuple[Sequence[str], Sequence[float]]],
                   go_string: object) -> list[str]:
    """``$tKernelsFor(model)``: the packed curves per BLIS model name, nil if unknown.

    ``kernels``: model short name -> (names BLIS may use, lower-case; the packed block of
    ``evaluator.data.kernel_tables.kernel_block``). ``go_string`` quotes a name for Go.
    """
    quote = go_string  # a callable; typed loosely to keep this module free of go.py
    lines = [f"// {low}KernelsFor returns the packed measured kernel curves of a BLIS model "
             "name", "// (evaluator/data/kernel_tables.py), or nil for a model without "
             "them (roofline).",
             f"func {low}KernelsFor(model string) []float64 {{"]
    if not kernels:
        return [*lines, "\treturn nil", "}"]
    lines += ["\tname := strings.ToLower(model)",
              "\tfor _, key := range []string{name, name[strings.LastIndex(name, \"/\")+1:]} {",
              "\t\tswitch key {"]
    for model, (aliases, block) in sorted(kernels.items()):
        names = sorted({model.lower(), *(a.lower() for a in aliases)}
                       | {a.lower().rsplit("/", 1)[-1] for a in aliases})
        lines.append("\t\tcase " + ", ".join(quote(a) for a in names) + ":")  # type: ignore[operator]
        nums = [("-" if v < 0 else "") + go_float(abs(float(v))) for v in block]
        lines.append("\t\t\treturn []float64{")
        for i in range(0, len(nums), 6):
            lines.append("\t\t\t\t" + ", ".join(nums[i:i + 6]) + ",")
        lines.append("\t\t\t}")
    return [*lines, "\t\t}", "\t}", "\treturn nil", "}"]
