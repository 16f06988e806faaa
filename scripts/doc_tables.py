#!/usr/bin/env python3
"""Figures the docs quote, generated from the model: every block between `<!-- table: NAME -->` and
`<!-- /table -->` in README.md and docs/*.md is the output of the generator NAME below.

`tests/test_doc_tables.py` fails when a block is stale (the model or the calibration moved) or names no
generator, so no figure in the docs drifts from what the product computes. Run after a model change:

    python scripts/doc_tables.py            # rewrite the stale blocks, print which
    python scripts/doc_tables.py --check    # exit 1 when a block is stale, write nothing
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCK = re.compile(r"(<!-- table: ([a-z0-9-]+) -->\n)(.*?)(<!-- /table -->)", re.S)
SCENARIOS = REPO / "scenarios"
L70_TRN2 = SCENARIOS / "llama2-70b-tp32pp4-trn2-64.yaml"
AXLEARN = SCENARIOS / "axlearn-llama2-70b-trn2-64.yaml"
TRN3_GEN1 = SCENARIOS / "llama3.1-70b-trn3-gen1.yaml"


def _fitted() -> dict:
    from ultracluster.calibration.fitted_files import fitted_document

    return fitted_document()


def _predict(path: Path, sets: tuple[str, ...] = ()) -> dict:
    from ultracluster import load_scenario
    from ultracluster.runner import predict

    return predict(load_scenario(path, list(sets)), intervals=True)


def _s(v: float) -> str:
    return f"{v:.1f} s" if v < 100 else f"{v:,.0f} s"


def readme_trust() -> str:
    """README: what the Trn1 fit rests on and how far it misses a layout left out; what the Trn2 and Trn3 bands
    rest on."""
    fit = _fitted()
    fitted = [n for n, v in fit["layouts"].items() if v["fitted"]]
    cv, cov, sc = fit["cross_validation"], fit["interval_coverage"], fit.get("scaling", {})
    t1 = fit["layouts"].get("axlearn-llama2-70b-trn2-64", {})
    lines = [f"- Trainium (trn1): fitted to {cov['rows']} published runs of {len(fitted)} layouts"
             + (f" and {len(sc.get('pairs', {}))} same-release scaling pairs" if sc else "")
             + f". A layout left out of the fit is missed by a median of {cv['median_abs_error_pct']:.0f} % and at "
             f"worst {cv['worst_abs_error_pct']:.0f} % (leave-one-layout-out); the interval holds "
             f"{cov['coverage_pct']:.0f} % of the published rows ([docs/calibration.md](docs/calibration.md))."]
    go = fit.get("group_out")
    if go:
        c, f = go["cells"], go["families"]
        lines.append(f"- A new kind of job: with every run of a (stack, pipelined or not) cell left out at once the "
                     f"fit misses that cell by a median of {c['median_abs_error_pct']:.0f} % and at worst "
                     f"{c['worst_abs_error_pct']:.0f} %; with a model family left out, {f['median_abs_error_pct']:.0f} % "
                     f"and {f['worst_abs_error_pct']:.0f} % (leave-one-group-out). A scenario whose cell has no "
                     "calibration row says so in `extrapolated`, and its interval widens by the cell figure.")
    if t1:
        t2 = fit["trn2"]
        widths = [_predict(p) for p in (AXLEARN, L70_TRN2, TRN3_GEN1)]
        w = [f"{100 * (x['step_time_high_s'] / x['step_time_low_s'] - 1):.0f} %" for x in widths]
        lines.append(f"- Trainium2: one published training run (`t1`: AXLearn, Llama-2-70B on 64 trn2.48xlarge, "
                     f"{1024 / t1['median_seq_per_s']:.1f} s per step), used three times, so agreeing with it is no "
                     f"evidence: it fits the one Trn2 factor it can pin (`{t2['factor']}`; the model then gives "
                     f"{1024 / t1['predicted_seq_per_s']:.1f} s by construction), it chose the FSDP schedule default "
                     "(`parallelism.fsdp_schedule: compiler`), and it weights every Trn2 and Trn3 interval. The Trn2 "
                     f"bands ({w[0]} wide on its layout, {w[1]} on the Llama-2-70B TP32 PP4 job) rest on the Trn2 "
                     "factors' argued ranges weighted by how well each setting reproduces that run; no second Trn2 run "
                     "measures how often they hold the truth ([docs/trn2.md](docs/trn2.md)).")
        lines.append("- Trainium3: no published training or collective run. A Trn3 band "
                     f"({w[2]} wide on the Llama-3.1-70B Trn3 Gen1 job) rests on AWS's specifications and the argued "
                     "ranges of the factors no measurement pins, those Trn3 borrows from Trn2 weighted by `t1`, a Trn2 "
                     "run; nothing measures its coverage ([docs/trainium3.md](docs/trainium3.md)).")
    return "\n".join(lines) + "\n"


def scenarios_stacks() -> str:
    """docs/scenarios.md: every training stack's defaults, pipeline engine and what it runs, from ultracluster/stacks.py."""
    from ultracluster import stacks

    def join(v) -> str:
        return ", ".join(map(str, v)) if v else "none"

    lines = ["| stack | fills (when not given) | pipeline engine per microbatch and stage | runs |",
             "| --- | --- | --- | --- |"]
    for name in stacks.NAMES:
        st = stacks.STACKS[name]
        def said(v) -> str:     # a stack default, which may depend on pp, the MLP kind or seq_len
            if isinstance(v, dict) and "pp1" in v:
                return f"{said(v['pp1'])} (pp 1), {said(v['pipeline'])} (pp > 1)"
            if isinstance(v, dict) and "seq_len" in v:
                return ", ".join(f"{said(b)} at seq_len {a}" for a, b in v["seq_len"].items()) + f", else {said(v['other'])}"
            if isinstance(v, dict):
                return ", ".join(f"{a} {said(b)}" for a, b in v.items())
            return f"{v:g}" if isinstance(v, float) else str(v).lower()
        fills = "; ".join(f"`{k}`: " + said(v) for k, v in st.defaults.items()) or "nothing"
        e, sup = st.engine, st.support
        engine = ("none" if e.graph_factor is None else
                  f"{e.graphs_fwd:g} + {e.graphs_bwd:g} graph executions at `{e.graph_factor}` each, sends and "
                  f"receives in-graph; {e.graphs_pp1:g} per microbatch without a pipeline")
        runs = (f"chips {join(sup.chips[0])}; pipeline {'yes' if sup.pp[0] else 'no'}; ZeRO {join(sup.zero[0])}"
                + (f" (with a pipeline {join(sup.zero_with_pp[0])})" if sup.pp[0] else "")
                + (f"; schedules {join(sup.schedules[0])}" if sup.pp[0] else "")
                + f"; cp {'yes' if sup.cp[0] else 'no'}; ep {'yes' if sup.ep[0] else 'no'}; LNC {join(sup.lnc[0])}")
        lines.append(f"| `{name}` | {fills} | {engine} | {runs} |")
    return "\n".join(lines) + "\n"


def uncertainty_examples() -> str:
    """docs/uncertainty.md: three jobs' points and 80 % intervals, and the Trn2/Trn1 per-instance ratio."""
    jobs = [("Llama-2-70B TP32 PP4 DP32, 64 x trn1.32xlarge", L70_TRN2, ("cluster.instance=trn1.32xlarge",)),
            ("the same on 64 x trn2.48xlarge (LNC=2)", L70_TRN2, ()),
            ("AXLearn layout, FSDP x TP4, 64 x trn2.48xlarge (`scenarios/axlearn-llama2-70b-trn2-64.yaml`; `t1`'s "
             "layout, fitted to it)", AXLEARN, ())]
    out = ["| job | point | 80 % interval |", "| --- | --- | --- |"]
    res = []
    for label, path, sets in jobs:
        s = _predict(path, sets)
        res.append(s)
        out.append(f"| {label} | {_s(s['step_time_s'])} | {s['step_time_low_s']:.1f} – {s['step_time_high_s']:.1f} s |")
    trn1, trn2 = res[0], res[1]
    out += ["", f"The Trn2 per-instance speed-up on the Llama-2-70B job is {trn1['step_time_s'] / trn2['step_time_s']:.2f}x "
            f"({trn1['step_time_low_s'] / trn2['step_time_high_s']:.1f}x – {trn1['step_time_high_s'] / trn2['step_time_low_s']:.1f}x "
            "from the two intervals' ends)."]
    return "\n".join(out) + "\n"


def trn2_vs_trn1() -> str:
    """docs/trn2.md: the Llama-2-70B TP32 PP4 job on Trn2 and Trn1, where the step goes."""
    cases = [("trn2.48xlarge, default", ()),
             ("trn2.48xlarge, `trn2-nccom-examples`", ("cluster.network.calibration=trn2-nccom-examples",)),
             ("trn1.32xlarge", ("cluster.instance=trn1.32xlarge",))]
    got = [(label, _predict(L70_TRN2, sets)) for label, sets in cases]
    trn1 = got[-1][1]["step_time_s"]
    out = ["| | step | compute | tensor-parallel | data-parallel | bubble | TP share | Trn1 / Trn2 |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for label, s in got:
        ratio = "" if label.startswith("trn1") else f"{trn1 / s['step_time_s']:.2f}x"
        out.append(f"| {label} | {s['step_time_s']:.1f} | {s['compute_s']:.1f} | {s['tp_comm_s']:.1f} | "
                   f"{s['dp_comm_s']:.1f} | {s['bubble_s']:.1f} | {100 * s['tp_comm_s'] / s['step_time_s']:.0f} % | {ratio} |")
    return "\n".join(out) + "\n"


def trn2_axlearn() -> str:
    """docs/trn2.md: the AXLearn row against the model, with the interval."""
    fit = _fitted()
    t1 = fit["layouts"].get("axlearn-llama2-70b-trn2-64")
    s = _predict(AXLEARN)
    out = ["| | step | 80 % interval | MFU | compute | tensor-parallel | data-parallel (FSDP exposed) |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
           f"| model | {s['step_time_s']:.1f} s | {s['step_time_low_s']:.1f} – {s['step_time_high_s']:.1f} s | "
           f"{100 * s['mfu']:.0f} % | {s['compute_s']:.1f} s | {s['tp_comm_s']:.1f} s | {s['dp_comm_s']:.1f} s |"]
    if t1:
        step = 1024 / t1["median_seq_per_s"]
        out.append(f"| published (`t1`; the model's step is fitted to it) | {step:.1f} s | | "
                   f"{100 * s['mfu'] * s['step_time_s'] / step:.0f} % | | | |")
    return "\n".join(out) + "\n"


def trn2_fsdp_default() -> str:
    """docs/trn2.md: what `t1` comes out at under each FSDP schedule over its fitted factor's argued range (the
    default was chosen with that run in view)."""
    from ultracluster import load_scenario
    from ultracluster.calibration.fitted_files import fitted
    from ultracluster.runner import predict

    t2 = _fitted()["trn2"]
    lo, hi = t2["argued_range"]
    path = SCENARIOS / "calib-axlearn-llama2-70b-trn2-64.yaml"
    got = {sched: [predict(load_scenario(path, [f"parallelism.fsdp_schedule={sched}"]),
                           fitted().with_(**{t2["factor"]: x}))["step_time_s"] for x in (lo, hi)]
           for sched in ("compiler", "layerwise")}
    return (f"The default was chosen with `t1` in view: over `{t2['factor']}`'s whole argued range ({lo:g} – {hi:g}) "
            f"the model gives `t1` {got['compiler'][0]:.1f} – {got['compiler'][1]:.1f} s with `compiler` and "
            f"{got['layerwise'][0]:.1f} – {got['layerwise'][1]:.1f} s with `layerwise`, against the measured "
            f"{t2['published_step_s']:g} s. The Neuron documentation (H21) supports `compiler` on its own, but the "
            "run that fits the factor also picked the schedule, so the run checks neither the schedule nor the factor "
            "(`tests/cluster/test_trn2_factors.py`).\n")


def trn2_bands() -> str:
    """docs/trn2.md: the 80 % band of the Trainium2 and Trainium3 jobs the issue names, weighted by `t1`, and
    the Trn2 / Trn1 speed-up of the Llama-2-70B job at its point and band ends."""
    out = ["| job | step | 80 % interval | width (high / low - 1) | extrapolated |", "| --- | ---: | ---: | ---: | --- |"]
    for label, path in (("AXLearn Llama-2-70B, 64 trn2.48xlarge (`t1`'s layout, fitted to it)", AXLEARN),
                        ("Llama-2-70B TP32 PP4, 64 trn2.48xlarge", L70_TRN2),
                        ("Llama-3.1-70B, Trn2 UltraServers", REPO / "scenarios" / "llama3.1-70b-trn2-ultraserver.yaml"),
                        ("Llama-3.1-70B, Trn3 Gen1", TRN3_GEN1),
                        ("Llama-3.1-405B, 16,384 Trn2 chips", REPO / "scenarios" / "llama3.1-405b-trn2-16k.yaml")):
        s = _predict(path)
        out.append(f"| {label} | {s['step_time_s']:.1f} s | {s['step_time_low_s']:.1f} – {s['step_time_high_s']:.1f} s | "
                   f"{100 * (s['step_time_high_s'] / s['step_time_low_s'] - 1):.0f} % | "
                   f"{', '.join(s['extrapolated']) or 'none'} |")
    return "\n".join(out) + "\n"


def uncertainty_coverage() -> str:
    """docs/uncertainty.md: the cross-validated coverage of the Trn1 interval."""
    fit = _fitted()
    cov, cv = fit["interval_coverage"], fit["cross_validation"]
    return (f"Today: **{cov['rows_covered']} of the {cov['rows']} published Trn1 rows ({cov['coverage_pct']:.0f} %) and "
            f"{cov['layout_medians_covered']} of the {cov['layouts']} layout medians**, with a **median full width "
            f"(high / low − 1) of {cov['median_full_width_pct']:.0f} %** on Trn1. The width is what the cross-validated "
            f"residuals (median {cv['median_abs_error_pct']:.0f} %, worst {cv['worst_abs_error_pct']:.0f} %) and the release "
            f"spread ({100 * fit['release_spread']:.0f} %) honestly give.\n")


def reports_summary() -> str:
    """docs/reports.md: the summary table `run` prints, for the smoke scenario at TP4 CP2 on 2 actors."""
    from ultracluster import load_scenario
    from ultracluster.runner import predict
    from ultracluster.report import format_summary

    s = predict(load_scenario(SCENARIOS / "smoke.yaml", ["parallelism.tp=4", "parallelism.cp=2"]), intervals=True)
    return "```\n" + format_summary({**s, "actors": 2}) + "\n```\n"


def scenarios_degraded() -> str:
    """docs/scenarios.md: what the two degraded-instance examples do to the smoke scenario."""
    smoke = SCENARIOS / "smoke.yaml"
    base = _predict(smoke)
    nics = _predict(smoke, ("faults.degraded=[{instances: [1], efa_nics: 4}]",))
    link = _predict(smoke, ("faults.degraded=[{instances: [0], neuronlink_scale: 0.5}]",))
    ms = lambda v: f"{1e3 * v:.1f}"   # noqa: E731
    return (f"On `scenarios/smoke.yaml` (2 trn1.32xlarge, tp 8, pp 2, dp 4) `--set 'faults.degraded=[{{instances: [1],\n"
            f"efa_nics: 4}}]'` raises the data-parallel reduction from {ms(base['dp_comm_s'])} to {ms(nics['dp_comm_s'])} ms "
            f"and the step from {ms(base['step_time_s'])} to {ms(nics['step_time_s'])} ms;\n"
            "`--set 'faults.degraded=[{instances: [0], neuronlink_scale: 0.5}]'` slows the tensor-parallel collectives of\n"
            f"replicas 0 and 1 (on instance 0; the `ranks` table shows them) and the step to {ms(link['step_time_s'])} ms.\n")


def trn2_factors() -> str:
    """docs/trn2.md: every Trn2 uncertain factor, its central value, its argued range and the part of it the
    published Trn2 row allows (what the intervals use)."""
    from ultracluster import load_scenario
    from ultracluster.cluster import build_cluster
    from ultracluster.uncertainty import factor_value, factors_for

    sc = load_scenario(L70_TRN2)
    cl = build_cluster(sc, sc.cluster.instances)
    cal = cl.calibration
    pinned = {f.name: f for f in factors_for(cl)}
    out = ["| factor | central | argued range | what `t1` allows (used) | why |", "| --- | ---: | ---: | ---: | --- |"]

    def v(x: float) -> str:
        return f"{x * 1e6:.3g} us" if 0 < abs(x) < 1e-3 else f"{x:.3g}"
    for f in factors_for(cl, pinned=False):
        central = factor_value(cal, f.name)
        p = pinned[f.name]
        out.append(f"| `{f.name}` | {v(central)} | {v(f.low)} – {v(f.high)} | {v(p.low)} – {v(p.high)} | {f.why} |")
    return "\n".join(out) + "\n"


def trn2_whatifs() -> str:
    """docs/trn2.md: the Llama-2-70B TP32 PP4 job under the what-ifs the page discusses."""
    cases = [("trn2.48xlarge, BF16 (the scenario)", ()),
             ("FP8 on every matmul (`training.precision=fp8`)", ("training.precision=fp8",)),
             ("64 trn2u.48xlarge (UltraServers, Z links)", ("cluster.instance=trn2u.48xlarge",)),
             ("64 trn2u.48xlarge, EFA 800 Gbit/s per instance", ("cluster.instance=trn2u.48xlarge",
                                                                  "cluster.network.efa_gbps=800"))]
    out = ["| case | step | compute | data-parallel |", "| --- | ---: | ---: | ---: |"]
    for label, sets in cases:
        s = _predict(L70_TRN2, sets)
        out.append(f"| {label} | {s['step_time_s']:.1f} s | {s['compute_s']:.1f} s | {s['dp_comm_s']:.1f} s |")
    return "\n".join(out) + "\n"


def plan_largest_clusters() -> str:
    """docs/plan.md: the most instances `plan --instances` accepts per instance type (the catalog's largest
    cluster of its chip)."""
    from ultracluster.cluster.catalog import INSTANCES, ULTRACLUSTER_CHIPS, largest_cluster

    rows = ["| instance type | chip | largest cluster (chips) | most instances |", "| --- | --- | --- | --- |"]
    rows += [f"| {name} | {spec.chip.name} | {ULTRACLUSTER_CHIPS[spec.chip.name]:,} | {largest_cluster(spec):,} |"
             for name, spec in INSTANCES.items()]
    return "\n".join(rows) + "\n"


def plan_stacks() -> str:
    """docs/plan.md: the newcomer's 70B job searched within each Neuron stack on 32 trn1.32xlarge and 32
    trn2.48xlarge: the best layout of each stack, by tokens/s at the slow end, against the scenario's own."""
    from ultracluster.plan import SearchSpace, plan
    from ultracluster.stacks import NEURON_STACKS

    r = plan(REPO / "scenarios" / "llama3.1-70b-trn1-32.yaml", SearchSpace(
        instance_types=("trn1.32xlarge", "trn2.48xlarge"), instance_counts=(32,), stacks=NEURON_STACKS),
        replay=False, top=1)
    rows = ["| stack | best layout | tokens/s, slow end | tokens/s | MFU | off domain | vs the scenario's own layout |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for x in r.summary["best_per_stack"]:
        flag = " !" if x["mfu_implausible"] else ""
        rows.append(f"| {x['stack']} | {x['label'].split(': ')[-1]} | {x['rank_value']:,.0f} | {x['tokens_per_s']:,.0f} "
                    f"| {100 * x['mfu']:.1f} %{flag} | {', '.join(x['extrapolated']) or '-'} | {x['vs_scenario']} |")
    for name, why in r.summary["stacks_without_a_layout"].items():
        rows.append(f"| {name} | {why.split('; closest')[0]} | | | | | |")
    own = r.summary["scenario_layout"]
    best = ", ".join(f"{k} {100 * v:.1f} %" for k, v in r.summary["mfu_best_published"].items() if v is not None)
    return "\n".join(rows) + (f"\n\n`!`: MFU above the best published run of its chip ({best}). The scenario's own "
                              f"layout ({own['label'].split(': ')[-1]}) {own['standing']}.\n")


def calibrate_curve() -> str:
    """docs/performance.md: `ultracluster calibrate` on the k smallest public Trn1 layouts, the others predicted."""
    from ultracluster.calibrate.curve import curve_table, learning_curve

    return curve_table(learning_curve())


FSX = SCENARIOS / "faults-llama3-70b-trn2-sync.yaml"
FSX_VARY = ["storage.throughput_mbps_per_tib=125,250,1000", "storage.capacity_tib=4.8,48", "checkpoint.mode=sync,async"]
FSX_CHART = REPO / "docs" / "sweeps-fsx.svg"


def _fsx_sweep(conservative: bool):
    """docs/sweeps.md's example: the 12 FSx variants with --hours 720, evaluated in this process as a sweep's tasks
    evaluate them (`sweep.evaluate.evaluate_variant`), both settings of --assumptions at once, over two processes
    (each variant's 720 hours are independent of the others; the same rows as one after another)."""
    from concurrent.futures import ProcessPoolExecutor

    from ultracluster.sweep import build
    from ultracluster.sweep.evaluate import evaluate_variant
    from ultracluster.sweep.output import table

    if conservative not in _FSX:
        plans = {c: build(FSX, ["training.budget_tokens=1.5e12"], FSX_VARY, None, 720.0, conservative=c)
                 for c in (False, True)}
        jobs = [(c, v) for c in (False, True) for v in plans[c].variants]
        with ProcessPoolExecutor(max_workers=2) as pool:
            figures = list(pool.map(evaluate_variant, [v.scenario for _, v in jobs], [720.0] * len(jobs),
                                    [not c for c, _ in jobs]))
        for c in (False, True):
            rows = [{"variant": v.index + 1, "key": v.key, **v.values, **f}
                    for (cc, v), f in zip(jobs, figures) if cc == c]
            _FSX[c] = (table(rows, plans[c].keys), plans[c].keys)
    return _FSX[conservative]


_FSX: dict = {}


def sweeps_fsx() -> str:
    """docs/sweeps.md: goodput over 30 days by FSx tier, capacity and checkpoint mode, with the burst allowance
    assumed and at its conservative end (--assumptions off)."""
    on, keys = _fsx_sweep(False)
    off, _ = _fsx_sweep(True)
    tiers = list(dict.fromkeys(on[keys[0]]))
    out = ["| checkpoint, capacity | " + " | ".join(f"{t:g} MB/s/TiB" for t in tiers) + " |",
           "| --- |" + " --- |" * len(tiers)]
    for mode in ("sync", "async"):
        for cap in (4.8, 48):
            cells = []
            for t in tiers:
                sel = (on[keys[0]] == t) & (on[keys[1]] == cap) & (on[keys[2]] == mode)
                a, b = float(on[sel]["goodput"].iloc[0]), float(off[sel.to_numpy()]["goodput"].iloc[0])
                cells.append(f"{100 * a:.2f} % ({100 * b:.2f} %)")
            out.append(f"| {mode}, {cap:g} TiB | " + " | ".join(cells) + " |")
    g = {(t, m, o): float(f[(f[keys[0]] == t) & (f[keys[1]] == 48) & (f[keys[2]] == m)]["goodput"].iloc[0])
         for t in (125, 250) for m in ("sync",) for o, f in (("on", on), ("off", off))}
    days = on[(on[keys[0]] == 1000) & (on[keys[1]] == 48) & (on[keys[2]] == "async")]["time_to_train_days"].iloc[0]
    out += ["", f"At 48 TiB with sync checkpoints, 125 and 250 MB/s/TiB differ by "
            f"{100 * abs(g[(250, 'sync', 'on')] - g[(125, 'sync', 'on')]):.2f} points with the assumed burst "
            f"allowance and by {100 * abs(g[(250, 'sync', 'off')] - g[(125, 'sync', 'off')]):.2f} points without it. "
            f"1.5 T tokens take {days:.1f} days on the best of them (1000 MB/s/TiB, 48 TiB, async)."]
    return "\n".join(out) + "\n"


def sweeps_fsx_chart() -> str:
    """docs/sweeps.md: the chart sweep.html draws of the example's goodput by tier (docs/sweeps-fsx.svg, written
    here; the block holds its hash, so a stale picture makes the block stale)."""
    import hashlib

    from ultracluster.sweep.html import line_chart

    on, keys = _fsx_sweep(False)
    svg = line_chart(on, keys[0], keys, "goodput", standalone=True)
    if not FSX_CHART.is_file() or FSX_CHART.read_text() != svg:
        FSX_CHART.write_text(svg)
    return (f"![goodput over 30 days by FSx throughput tier, a line per capacity and checkpoint mode](sweeps-fsx.svg)\n"
            f"<!-- sweeps-fsx.svg sha256 {hashlib.sha256(svg.encode()).hexdigest()[:16]} -->\n")


GENERATORS = {"sweeps-fsx": sweeps_fsx, "sweeps-fsx-chart": sweeps_fsx_chart, "calibrate-curve": calibrate_curve, "trn2-whatifs": trn2_whatifs, "trn2-factors": trn2_factors,
              "scenarios-degraded": scenarios_degraded, "reports-summary": reports_summary,
              "uncertainty-coverage": uncertainty_coverage, "readme-trust": readme_trust,
              "uncertainty-examples": uncertainty_examples, "trn2-vs-trn1": trn2_vs_trn1, "trn2-axlearn": trn2_axlearn,
              "trn2-bands": trn2_bands, "scenarios-stacks": scenarios_stacks, "trn2-fsdp-default": trn2_fsdp_default,
              "plan-largest-clusters": plan_largest_clusters, "plan-stacks": plan_stacks}


def render(text: str, cache: dict[str, str]) -> str:
    """`text` with every block replaced by its generator's output (unknown names raise KeyError)."""
    def sub(m: re.Match) -> str:
        name = m.group(2)
        if name not in GENERATORS:
            raise KeyError(f"no generator for the docs block {name!r}; known: {', '.join(GENERATORS)}")
        if name not in cache:
            cache[name] = GENERATORS[name]()
        return m.group(1) + cache[name] + m.group(4)
    return BLOCK.sub(sub, text)


def stale(write: bool) -> list[str]:
    """Names of the files whose blocks are out of date (rewritten when `write`)."""
    cache: dict[str, str] = {}
    out = []
    for path in DOCS:
        text = path.read_text()
        if "<!-- table:" not in text:
            continue
        new = render(text, cache)
        if new != text:
            out.append(str(path.relative_to(REPO)))
            if write:
                tmp = path.with_suffix(".md.tmp")
                tmp.write_text(new)
                tmp.replace(path)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when a block is stale; write nothing")
    args = ap.parse_args(argv)
    files = stale(write=not args.check)
    verb = "stale" if args.check else "rewritten"
    print(f"{verb}: {', '.join(files)}" if files else "docs tables are current")
    return 1 if files and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
