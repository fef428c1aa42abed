#!/usr/bin/env python3
"""Shape of the live-set VMM price from `sim calibrate --only live-set` sets (pure Python).

Per (work, call, live level L): fits t = fixed + g * c(L) over the unit sizes g (least squares
on relative residuals, as validate/src/live_set_fit.rs), each cell t = median over blocks of
the block medians. Prints c(L) (µs per granule) per level, then fits of c(L) against L:
linear, and piecewise linear between the measured levels (the shape itself)."""
import json, sys, statistics as st

def cells(arm, work, call):
    by = {}
    for p in arm['points']:
        if p['work'] != work: continue
        by.setdefault((p['granules'], p['live_granules']), []).append(p[call + '_us']['median'])
    return {k: st.median(v) for k, v in by.items()}

def fit2(xs, ys, ws):
    # weighted least squares y = a + b x
    sw = sum(ws); sx = sum(w*x for w, x in zip(ws, xs)); sy = sum(w*y for w, y in zip(ws, ys))
    sxx = sum(w*x*x for w, x in zip(ws, xs)); sxy = sum(w*x*y for w, x, y in zip(ws, xs, ys))
    d = sw*sxx - sx*sx
    b = (sw*sxy - sx*sy)/d; a = (sy - b*sx)/sw
    return a, b

def main(paths):
    arms = []
    for p in paths:
        d = json.load(open(p)); arms.append(d['live_set'])
    pts = {'points': [q for a in arms for q in a['points']]}
    probes = [q['launch_us'] for a in arms for q in a['probes']]
    print(f"sets {len(paths)}, points {len(pts['points'])}, probe median {st.median(probes):.2f} µs (min {min(probes):.2f} max {max(probes):.2f})")
    out = {}
    for work in ('idle', 'kernels'):
        for call in ('commit', 'decommit'):
            c = cells(pts, work, call)
            levels = sorted({l for _, l in c})
            row = []
            for L in levels:
                gs = sorted(g for g, l in c if l == L)
                ts = [c[(g, L)] for g in gs]
                a, b = fit2(gs, ts, [1/t/t for t in ts])
                row.append((L, a, b))
            out[(work, call)] = row
            print(f"{work:8s} {call:9s} " + "  ".join(f"L={L}: {b:.2f}(+{a:.0f})" for L, a, b in row))
            xs = [L/1024 for L, _, _ in row]; ys = [b for _, _, b in row]
            a, b = fit2(xs, ys, [1]*len(xs))
            res = [y - (a + b*x) for x, y in zip(xs, ys)]
            print(f"   linear c(L) = {a:.2f} + {b:.4f} L/1024 µs/granule; residuals " + " ".join(f"{r:+.2f}" for r in res))
    return out


import math
def shapes(out):
    """c(L) = a + b f(L) for f linear, sqrt, log2(1 + L/1024), and the power p that fits best."""
    for key, row in out.items():
        xs = [L/1024 for L, _, _ in row]; ys = [b for _, _, b in row]
        res = {}
        fs = {'linear': lambda x: x, 'sqrt': math.sqrt, 'log2(1+x)': lambda x: math.log2(1+x)}
        for p in [i/20 for i in range(2, 21)]:
            fs[f'x^{p:.2f}'] = (lambda p: lambda x: x**p)(p)
        for n, f in fs.items():
            fx = [f(x) for x in xs]; a, b = fit2(fx, ys, [1]*len(xs))
            rms = math.sqrt(sum((y-(a+b*v))**2 for v, y in zip(fx, ys))/len(ys))
            res[n] = (rms, a, b)
        best = min((k for k in res if k.startswith('x^')), key=lambda k: res[k][0])
        print(f"{key[0]:8s} {key[1]:9s} " + "  ".join(f"{n}: rms {res[n][0]:.2f} (a {res[n][1]:.2f} b {res[n][2]:.3f})" for n in ['linear', 'sqrt', 'log2(1+x)', best]))

if __name__ == '__main__':
    shapes(main(sys.argv[1:]))
