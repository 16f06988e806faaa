#!/usr/bin/env python3
"""Fit the chip model's calibration factors to the published training runs; cross-validate, ablate, and
write the tables.

Fits only to `data/calibration/training.csv` (the project's rule). Rows are grouped by `layout`; each
layout's target is the median `seq_per_s` over the Neuron releases that published it, and only layouts whose
`quality` is not `uncertain` are fitted. For each layout the scenario is built from its row's own columns and
predicted in-process (`ultracluster.pipeline.predict`, no Ray).

The fitted factors (FIT) minimise the sum over layouts of log(predicted / median)^2, by a deterministic
Nelder-Mead search from fixed starts inside each factor's physical bounds; every other factor keeps the value
`ultracluster/cluster/calibration.py` documents (ASSUMED lists those set from a source or an argument). The
script then reports:

- leave-one-layout-out cross-validation: refit without each layout, predict it;
- identifiability: for each fitted factor, the range over which the RMS log error stays within
  sqrt(best^2 + spread^2) (spread: the RMS between-release spread of the layouts), the other factors held at
  their fit, and how a fixed set of Trn2 scenarios moves across that range;
- ablation: each mechanism switched off in turn and the factors refitted: the error per layout.

Writes `ultracluster/cluster/calibration.json` and `docs/calibration.md`. `--check` recomputes and exits 1
when either file is stale (the full cross-validation takes a few minutes; the test suite checks the cheap
parts, see tests/chip/test_calibration.py).

Usage: python scripts/calibrate.py [--check] [--data DIR]
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from nelder_mead import minimize  # noqa: E402
FITTED = REPO / "ultracluster" / "cluster" / "calibration.json"
DOC = REPO / "docs" / "calibration.md"
DATA = REPO / "data" / "calibration"

# The fitted factors: (name, lower bound, upper bound, start, scale of the search's first step, unit shown)
FIT = (
    ("tensor_efficiency", 0.2, 1.0, 0.7, 0.15, ""),
    ("in_graph_sync_s", 0.0, 5e-3, 0.5e-3, 0.5e-3, "ms"),
)
# The unnamed per-layer residual (`layer_overhead_s`): no longer fitted; the script refits it beside FIT once
# to show how much of the data the named mechanisms leave to it (RESIDUAL_CHECK)
RESIDUAL_CHECK = ("layer_overhead_s", 0.0, 10e-3, 0.3e-3, 0.5e-3, "ms")
# The mechanisms (docs/calibration.md explains each): label, the calibration field that switches it, and the
# field's value when the mechanism is off
MECHANISMS = (
    ("operator fusion", "fusion", False),
    ("engine element rates (128 lanes x clock)", "engine_clock_rates", False),
    ("flash attention: causal tiles, no double-counted recompute", "flash_attention", False),
    ("embedding and LM head on the end stages", "stage_ends", False),
    ("TP backward collectives behind the matmuls (switched on)", "tp_overlap", True),
    ("gradient reduction after the last backward", "dp_overlap", True),
    ("gradient-norm clipping", "step_costs", False),
    ("cheapest collective algorithm around a switch", "algorithm_envelope", 0.0),
    ("in-graph collective synchronisation", "in_graph_sync_s", 0.0),
)
# Trn2 scenarios whose movement across each factor's plausible range the identifiability table shows
TRN2_PROBES = (
    ("llama2-70b TP32 PP4 DP32, 64 x trn2.48xlarge",
     {"name": "probe-l70-trn2", "model": {"preset": "llama2-70b"},
      "training": {"seq_len": 4096, "global_batch": 1024, "micro_batch": 1, "steps": 1, "warmup_steps": 0},
      "parallelism": {"tp": 32, "pp": 4, "dp": 32}, "cluster": {"instance": "trn2.48xlarge", "instances": 64},
      "emulation": {"instances_per_actor": 64}}),
    ("llama3.1-8b TP8 DP64, 8 x trn2.48xlarge",
     {"name": "probe-l8-trn2", "model": {"preset": "llama3.1-8b"},
      "training": {"seq_len": 8192, "global_batch": 1024, "micro_batch": 1, "steps": 1, "warmup_steps": 0},
      "parallelism": {"tp": 8, "pp": 1, "dp": 64}, "cluster": {"instance": "trn2.48xlarge", "instances": 8},
      "emulation": {"instances_per_actor": 8}}),
)
# The data the fit reads (its staleness test also re-predicts every layout, which catches model changes)
INPUTS = ("data/calibration/training.csv", "operators/transformer.yaml", "ultracluster/network/collectives_fit.json")


def rows(data: Path) -> list[dict]:
    with open(Path(data) / "training.csv", newline="") as f:
        return list(csv.DictReader(f))


# What each training stack runs, from its public example scripts and configs (docs/calibration.md):
# - neuronx-distributed: the NKI flash-attention kernel, no dropout, sequence parallelism and the TP backward
#   collectives overlapped (the Llama examples), ZeRO-1 (`use_zero_1` in the example scripts);
# - neuronx-nemo-megatron: Megatron's core attention with the fused softmax (NEURON_FUSE_SOFTMAX=1) through
#   HBM, sequence_parallel=True; GPT recipes hidden_dropout 0.1 and the config's attention_dropout 0.1
#   (megatron_gpt_config.yaml, test.sh, gpt_23b.sh), Llama recipes hidden_dropout 0 (test_llama.sh); no ZeRO-1
#   (`wrap_with_zero` defaults to False and no example sets it: the `zero1` column); the async tensor-parallel
#   all-reduce is turned off whenever sequence parallelism is on (the fork's Megatron core), so no TP overlap;
# - megatron-lm-neuron: Megatron-LM's core attention without the masked-softmax fusion, dropout 0, no
#   sequence parallelism, and --no-async-tensor-model-parallel-allreduce (pretrain_gpt3_6.7B_32layers_bf16*.sh):
#   the backward all-reduce of the input gradient waits for its matmul instead of running beside the
#   weight-gradient matmul, so tp_comm_overlap is off; no distributed optimizer;
# - axlearn (the one Trn2 row): FSDP (ZeRO-3) x TP from the AXLearn Trn2 mesh rule at LNC=2, the NKI
#   flash-attention kernel, no dropout, full recomputation (what fits 24 GiB per rank; not printed).
STACKS = {
    "neuronx-distributed": {"attention": "flash", "dropout": {"gelu": 0.0, "swiglu": 0.0},
                            "sequence_parallel": True, "tp_comm_overlap": True},
    "neuronx-nemo-megatron": {"attention": "materialized", "dropout": {"gelu": 0.1, "swiglu": 0.0},
                              "sequence_parallel": True, "tp_comm_overlap": False},
    "megatron-lm-neuron": {"attention": "materialized", "dropout": {"gelu": 0.0, "swiglu": 0.0},
                           "sequence_parallel": False, "tp_comm_overlap": False},
    "axlearn": {"attention": "flash", "dropout": {"gelu": 0.0, "swiglu": 0.0},
                "sequence_parallel": True, "tp_comm_overlap": True, "zero": 3, "lnc": 2},
}
# Row qualities: fitted as a layout median (FITTED_QUALITIES), fitted only as the ratio inside a same-release
# pair (`pair`), or shown beside the fit and never fitted (`uncertain`; `paper`: the Trainium2 row, which the
# Trn1 factors are not fitted to)
FITTED_QUALITIES = ("table", "log")


def scenario_of(row: dict) -> dict:
    """The scenario a training.csv row describes (1 measured step; the replay is deterministic)."""
    stack = STACKS[row["stack"]]
    sharding = {"zero": stack["zero"]} if "zero" in stack else {"zero1": row["zero1"] == "true"}
    weights = {"master_weights": row["master_weights"]} if row["master_weights"] else {}
    return {
        "name": f"calib-{row['id']}",
        "model": {k: int(row[k]) for k in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab")}
        | {"mlp": row["mlp"], "preset": row["model"], "dropout": stack["dropout"][row["mlp"]]},
        "training": {"seq_len": int(row["seq_len"]), "global_batch": int(row["global_batch"]),
                     "micro_batch": int(row["micro_batch"]), "precision": row["precision"], **weights,
                     **sharding, "recompute": row["recompute"], "attention": stack["attention"], "steps": 1,
                     "warmup_steps": 0},
        "parallelism": {"tp": int(row["tp"]), "pp": int(row["pp"]), "dp": int(row["dp"]),
                        "sequence_parallel": stack["sequence_parallel"], "tp_comm_overlap": stack["tp_comm_overlap"]},
        "cluster": {"instance": row["instance"], "instances": int(row["instances"])}
        | ({"lnc": stack["lnc"]} if "lnc" in stack else {}),
        "emulation": {"instances_per_actor": int(row["instances"])},
    }


class Layouts:
    """The layouts of training.csv: their rows, medians, spreads, same-release pairs and scenarios.

    A layout is fitted (`certain`) through the median of its `table` and `log` rows on Trn1. Pair rows
    (`pair`: an old release's 1-instance and 16-instance figures printed side by side) enter only as the
    ratio inside each pair, the data-parallel scaling efficiency, which no release drift touches; the pairs'
    target is the median of those ratios (`scaling`). Uncertain and paper rows are predicted and shown only.
    """

    def __init__(self, data: Path):
        from ultracluster import load_scenario

        self.rows = rows(data)
        groups: dict[str, list[dict]] = {}
        for r in self.rows:
            groups.setdefault(r["layout"], []).append(r)
        self.names = list(groups)
        self.groups = groups
        self.fit_rows = {n: [r for r in rs if r["quality"] in FITTED_QUALITIES and r["instance"].startswith("trn1")]
                         for n, rs in groups.items()}
        shown = {n: self.fit_rows[n] or [r for r in rs if r["quality"] != "pair"] or rs for n, rs in groups.items()}
        self.median = {n: statistics.median(float(r["seq_per_s"]) for r in rs) for n, rs in shown.items()}
        self.quality = {n: rs[0]["quality"] for n, rs in shown.items()}
        self.certain = [n for n in self.names if self.fit_rows[n]]
        self.scenarios = {n: load_scenario(scenario_of(groups[n][0])) for n in self.names}
        logs = [np.log([float(r["seq_per_s"]) for r in self.fit_rows[n]]) for n in self.certain
                if len(self.fit_rows[n]) > 1]
        # between-release spread: RMS over layouts of the standard deviation of log seq/s across releases
        self.spread = float(np.sqrt(np.mean([np.var(x, ddof=1) for x in logs])))
        self.pairs = pairs_of(self.rows)
        self.scaling = statistics.median(p["scaling"] for p in self.pairs) if self.pairs else None

    def predict(self, calibration, names=None) -> np.ndarray:
        from ultracluster.pipeline import predict

        return np.array([predict(self.scenarios[n], calibration)["seq_per_s"] for n in (names or self.names)])

    def predicted_scaling(self, calibration) -> float:
        """The model's data-parallel scaling efficiency of the pairs' layouts: seq/s of the large run per
        instance over seq/s of the small run per instance."""
        p = self.pairs[0]
        small, large = self.predict(calibration, [p["small"], p["large"]])
        return float((large / p["large_instances"]) / (small / p["small_instances"]))

    def log_errors(self, calibration, names) -> np.ndarray:
        """Log errors of the named layouts' medians, and of the pairs' median scaling when there are pairs."""
        err = np.log(self.predict(calibration, names) / np.array([self.median[n] for n in names]))
        if self.scaling is None:
            return err
        return np.append(err, math.log(self.predicted_scaling(calibration) / self.scaling))


def pairs_of(all_rows: list[dict]) -> list[dict]:
    """Same-release pairs of `pair` rows: per release, the smaller and the larger run of one configuration
    and the published scaling efficiency (seq/s per instance of the larger over that of the smaller)."""
    by_sdk: dict[str, list[dict]] = {}
    for r in all_rows:
        if r["quality"] == "pair":
            by_sdk.setdefault(r["sdk"], []).append(r)
    out = []
    for sdk, rs in by_sdk.items():
        if len(rs) != 2:
            raise ValueError(f"training.csv: release {sdk} has {len(rs)} pair rows; a pair is two rows")
        small, large = sorted(rs, key=lambda r: int(r["instances"]))
        ratio = (float(large["seq_per_s"]) / int(large["instances"])) / (float(small["seq_per_s"]) / int(small["instances"]))
        out.append({"sdk": sdk, "ids": (small["id"], large["id"]), "small": small["layout"], "large": large["layout"],
                    "small_instances": int(small["instances"]), "large_instances": int(large["instances"]),
                    "scaling": ratio})
    if len({(p["small"], p["large"]) for p in out}) > 1:
        raise ValueError("training.csv: the pair rows must all pair the same two layouts")
    return out


def base_calibration(**changes):
    """The shipped calibration with the unnamed residual off (it is not fitted) and `changes` applied."""
    from ultracluster.cluster.calibration import DEFAULT

    return DEFAULT.with_(**{RESIDUAL_CHECK[0]: 0.0, **changes})


def _round(v: float) -> float:
    return float(f"{v:.3g}")


def fit(lay: Layouts, names, switches: dict | None = None, factors: tuple = FIT) -> tuple[dict, float]:
    """Fitted factors (3 significant digits) and the RMS log error over `names`, mechanisms as `switches`
    (a fitted factor given in `switches` is held at that value); `factors`: the free factors' bounds."""
    held = {b[0]: switches[b[0]] for b in factors if switches and b[0] in switches}
    free = tuple(b for b in factors if b[0] not in held)
    lo = np.array([b[1] for b in free])
    hi = np.array([b[2] for b in free])
    scale = np.array([b[4] for b in free])

    others = {k: v for k, v in (switches or {}).items() if k not in held}

    def params(u: np.ndarray) -> dict:
        return {**{b[0]: float(v) for b, v in zip(free, lo + (hi - lo) * np.clip(u, 0.0, 1.0))}, **held}

    def loss(u: np.ndarray) -> float:
        outside = float(np.sum(np.maximum(u - 1, 0) ** 2 + np.maximum(-u, 0) ** 2))
        err = lay.log_errors(base_calibration(**others, **params(u)), names)
        return float(np.sum(err ** 2)) + 1e3 * outside

    u0 = (np.array([b[3] for b in free]) - lo) / (hi - lo)
    u, _ = minimize(loss, u0, scale / (hi - lo), 200, 1e-9)
    u, _ = minimize(loss, u, 0.25 * scale / (hi - lo), 200, 1e-9)     # restart from the optimum: no collapsed simplex
    best = {k: _round(v) for k, v in params(u).items()}
    err = lay.log_errors(base_calibration(**others, **best), names)
    return best, float(np.sqrt(np.mean(err ** 2)))


def pct(x: float) -> float:
    return round(100 * (math.exp(x) - 1), 2)


def cross_validate(lay: Layouts) -> dict[str, dict]:
    """Leave-one-layout-out: refit on the other certain layouts and predict the one left out."""
    out = {}
    for n in lay.certain:
        others = [m for m in lay.certain if m != n]
        params, _ = fit(lay, others)
        out[n] = {"factors": params, "error_pct": pct(float(lay.log_errors(base_calibration(**params), [n])[0]))}
    return out


def coverage(lay: Layouts, cv: dict[str, dict]) -> dict:
    """Cross-validated coverage of the 80 % interval (ultracluster.uncertainty): for each fitted layout, the
    interval around its leave-one-out prediction, with the fit part taken from the other folds' residuals
    only, against the layout's median and against every release's figure."""
    from ultracluster.uncertainty import Evidence, interval

    med_in, rows_in, rows_all, widths = 0, 0, 0, []
    for n in lay.certain:
        others = [abs(math.log1p(cv[m]["error_pct"] / 100)) for m in lay.certain if m != n]
        ev = Evidence(fit_log=float(np.quantile(others, 0.8)), release_sigma=lay.spread)
        cal = base_calibration(**cv[n]["factors"])
        sc = lay.scenarios[n]
        step = sc.training.global_batch / float(lay.predict(cal, [n])[0])
        iv = interval(sc, step, cal, ev)
        widths.append(iv.high_s / iv.low_s - 1)
        med_in += iv.low_s <= sc.training.global_batch / lay.median[n] <= iv.high_s
        for r in lay.fit_rows[n]:
            rows_all += 1
            rows_in += iv.low_s <= sc.training.global_batch / float(r["seq_per_s"]) <= iv.high_s
    return {"layout_medians_covered": int(med_in), "layouts": len(lay.certain), "rows_covered": int(rows_in),
            "rows": int(rows_all), "coverage_pct": round(100 * rows_in / rows_all, 1),
            "median_full_width_pct": round(100 * float(np.median(widths)), 1)}


def identifiability(lay: Layouts, params: dict, rms: float) -> dict[str, dict]:
    """Per fitted factor: the range over which the RMS log error stays within sqrt(rms^2 + spread^2), the other
    factors held at their fit, and the Trn2 probes' step time at the range's ends."""
    from ultracluster import load_scenario
    from ultracluster.pipeline import predict

    limit = math.sqrt(rms ** 2 + lay.spread ** 2)
    probes = [(label, load_scenario(doc)) for label, doc in TRN2_PROBES]
    out = {}
    for name, lo, hi, *_ in FIT:
        grid = np.linspace(lo, hi, 41)
        if grid[0] == 0.0:
            grid[0] = hi * 1e-3
        ok = []
        for v in np.union1d(grid, [params[name]]):
            err = lay.log_errors(base_calibration(**{**params, name: float(v)}), lay.certain)
            if math.sqrt(float(np.mean(err ** 2))) <= limit:
                ok.append(float(v))
        low, high = min(ok), max(ok)
        moves = {}
        for label, sc in probes:
            t = [predict(sc, base_calibration(**{**params, name: v}))["step_time_s"] for v in (low, params[name], high)]
            moves[label] = [round(x, 3) for x in t]
        out[name] = {"low": _round(low), "high": _round(high), "at_bound": params[name] in (lo, hi),
                     "trn2_step_time_s": moves}
    return out


def ablation(lay: Layouts) -> dict[str, dict]:
    """Each mechanism off in turn, the other factors refitted: error per layout, RMS over the fitted layouts."""
    out = {}
    for label, field_name, off in MECHANISMS:
        params, rms = fit(lay, lay.certain, {field_name: off})
        params = {k: v for k, v in params.items() if k != field_name}
        err = lay.log_errors(base_calibration(**{field_name: off}, **params), lay.names)
        out[field_name] = {"label": label, "off": off, "factors": params, "rms_pct": round(100 * rms, 2),
                           "error_pct": {n: pct(float(e)) for n, e in zip(lay.names, err)}}
    return out


# The Trainium2-specific factor the one Trn2 row (`paper`) is fitted with, its search bounds, and the range the
# argument gives it (docs/trn2.md): from no synchronisation at all to the Trn1 value
TRN2_FIT = ("in_graph_sync_scale_trn2", 0.0, 3.0)
TRN2_ARGUED = (0.0, 1.0)


def fit_trn2(lay: Layouts, params: dict) -> dict:
    """Fit TRN2_FIT to the Trn2 row (its step time is monotone in the factor: bisection), then narrow every
    Trn2 uncertain factor to the part of its range over which that row stays within the release spread of its
    published figure, the other factors at their values (`pinned`, read by ultracluster.uncertainty)."""
    from ultracluster.cluster import build_cluster
    from ultracluster.pipeline import predict
    from ultracluster.uncertainty import factors_for

    papers = [n for n in lay.names if lay.quality[n] == "paper"]
    if not papers:
        return {}
    name = papers[0]
    sc, target = lay.scenarios[name], sc_step(lay, name)
    cal = base_calibration(**params)

    def step(**change) -> float:
        return predict(sc, cal.with_(**change))["step_time_s"]

    lo, hi = TRN2_FIT[1], TRN2_FIT[2]
    before = step(**{TRN2_FIT[0]: 1.0})
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if step(**{TRN2_FIT[0]: mid}) < target else (lo, mid)
    value = _round(0.5 * (lo + hi))
    cal = cal.with_(**{TRN2_FIT[0]: value})
    after = predict(sc, cal)["step_time_s"]
    pinned = {}
    for f in factors_for(build_cluster(sc, sc.cluster.instances, cal), pinned=False):
        central = getattr(cal.network, f.name) if hasattr(cal.network, f.name) else getattr(cal, f.name)
        grid = sorted(set(np.linspace(f.low, f.high, 9).tolist()) | {central})
        ok = [v for v in grid if abs(math.log(predict(sc, cal.with_(**{f.name: v}))["step_time_s"] / target))
              <= lay.spread]
        below = [v for v in grid if v <= central and all(u in ok for u in grid if v <= u <= central)]
        above = [v for v in grid if v >= central and all(u in ok for u in grid if central <= u <= v)]
        pinned[f.name] = [_round(min(below or [central])), _round(max(above or [central]))]
    return {"row": name, "published_step_s": round(target, 3), "factor": TRN2_FIT[0], "value": value,
            "argued_range": list(TRN2_ARGUED), "step_before_s": round(before, 3), "step_s": round(after, 3),
            "error_pct": round(100 * (after / target - 1), 2), "pinned": pinned}


def sc_step(lay: Layouts, name: str) -> float:
    """The published step time of a layout (its median's)."""
    return lay.scenarios[name].training.global_batch / lay.median[name]


def residual_check(lay: Layouts) -> dict:
    """The fit again with the unnamed per-layer residual free beside the fitted factors: how much of the data
    the named mechanisms leave to it (0 at its lower bound: the data want none)."""
    params, rms = fit(lay, lay.certain, factors=FIT + (RESIDUAL_CHECK,))
    return {"factors": params, "rms_pct": round(100 * rms, 2), "at_lower_bound": params[RESIDUAL_CHECK[0]] <= RESIDUAL_CHECK[1]}


def inputs_digest() -> str:
    h = hashlib.sha256()
    for rel in INPUTS:
        h.update(rel.encode())
        h.update((REPO / rel).read_bytes())
    return h.hexdigest()[:16]


def results(data: Path) -> dict:
    """Everything the fit reports, as a JSON-ready dict."""
    lay = Layouts(data)
    params, rms = fit(lay, lay.certain)
    trn2 = fit_trn2(lay, params)
    if trn2:
        params = {**params, trn2["factor"]: trn2["value"]}
    cal = base_calibration(**params)
    pred = dict(zip(lay.names, lay.predict(cal)))
    cv = cross_validate(lay)
    cv_err = [abs(cv[n]["error_pct"]) for n in lay.certain]
    return {
        "fitted_to": "data/calibration/training.csv",
        "inputs_sha256": inputs_digest(),
        **params,
        "rms_log_error": round(rms, 5),
        "release_spread": round(lay.spread, 5),
        "layouts": {n: {"median_seq_per_s": lay.median[n], "predicted_seq_per_s": round(float(pred[n]), 3),
                        "error_pct": round(100 * (pred[n] / lay.median[n] - 1), 2), "fitted": n in lay.certain,
                        "quality": lay.quality[n],
                        **({"cv_error_pct": cv[n]["error_pct"]} if n in cv else {})} for n in lay.names},
        "cross_validation": {"median_abs_error_pct": round(statistics.median(cv_err), 2),
                             "worst_abs_error_pct": round(max(cv_err), 2),
                             "folds": {n: cv[n]["factors"] for n in lay.certain}},
        "interval_coverage": coverage(lay, cv),
        "identifiability": identifiability(lay, params, rms),
        "ablation": ablation(lay),
        "residual_check": residual_check(lay),
        "trn2": trn2,
        "rows": {r["id"]: round(100 * (pred[r["layout"]] / float(r["seq_per_s"]) - 1), 2) for r in lay.rows},
        "scaling": scaling_results(lay, cal, pred),
    }


def scaling_results(lay: Layouts, cal, pred: dict) -> dict:
    """The pairs' published scaling efficiencies beside the model's."""
    if not lay.pairs:
        return {}
    first = lay.pairs[0]
    model = (pred[first["large"]] / first["large_instances"]) / (pred[first["small"]] / first["small_instances"])
    return {"small": first["small"], "large": first["large"], "median_pct": round(100 * lay.scaling, 2),
            "predicted_pct": round(100 * float(model), 2),
            "pairs": {p["sdk"]: {"rows": list(p["ids"]), "published_pct": round(100 * p["scaling"], 2)} for p in lay.pairs}}


def render(res: dict, data: Path) -> str:
    lay_rows = rows(data)
    L = res["layouts"]
    cv = res["cross_validation"]
    lines = [
        "# Calibration", "",
        "Generated by `python scripts/calibrate.py` from `data/calibration/training.csv` only (do not edit by hand; "
        "`tests/chip/test_calibration.py` fails when this page or `ultracluster/cluster/calibration.json` is stale).",
        "", "## Method", "",
        "Each layout of training.csv is one configuration published by several Neuron releases; its target is the "
        "median seq/s over its `table` and `log` rows on Trn1. Rows marked `pair` (an old release's 1-instance and "
        "16-instance figures printed side by side) enter only as the ratio inside each pair: the data-parallel "
        "scaling efficiency, which no release drift touches; the fit targets the median of those ratios as one more "
        "term. Layouts marked `uncertain` (model or batch inferred from an example log) and the Trainium2 row "
        "(`paper`) are shown but never fitted. The fitted factors minimise the sum of squared log errors over the "
        "fitted layouts and the pairs' scaling (deterministic Nelder-Mead inside each factor's physical bounds). "
        "Every other factor is set from a source or a physical argument below and named as an assumption.", "",
        f"Between-release spread (RMS over layouts of the standard deviation of log seq/s): "
        f"{100 * res['release_spread']:.1f} %. In-sample RMS log error: {100 * res['rms_log_error']:.1f} %.", "",
        "## Fitted factors", "",
        "| factor | value | identifiable range | meaning |", "| --- | --- | --- | --- |",
    ]
    meaning = {"tensor_efficiency": "achieved fraction of TensorE peak on large, well-tiled matmuls (shape effects "
                                    "are modelled separately)",
               "in_graph_sync_s": "fixed cost of every collective a training step's compiled graph issues, beyond "
                                  "its data movement: the engines hand it to the collective cores and wait for its "
                                  "completion (see Mechanisms below)"}
    for name, lo, hi, _, _, unit in FIT:
        ident = res["identifiability"][name]
        show = {"us": lambda v: f"{v * 1e6:.3g} us", "ms": lambda v: f"{v * 1e3:.3g} ms"}.get(unit, lambda v: f"{v:.3g}")
        lines.append(f"| `{name}` | {show(res[name])} | {show(ident['low'])} – {show(ident['high'])} "
                     f"(bounds {show(lo)} – {show(hi)}) | {meaning.get(name, '')} |")
    rc = res["residual_check"]
    lines += ["", f"The unnamed per-layer residual (`{RESIDUAL_CHECK[0]}`, a fixed time per transformer-layer pass) is "
              "not fitted: refitted once beside these factors, it comes out at "
              f"{rc['factors'][RESIDUAL_CHECK[0]] * 1e3:.3g} ms per pass (RMS {rc['rms_pct']:.1f} %"
              + (", at its lower bound: the data leave nothing to it" if rc["at_lower_bound"] else "")
              + "), so every run reports `residual_s` = 0."]
    lines += ["", "The identifiable range is where the RMS log error over the fitted layouts stays within "
              "sqrt(best² + spread²), the other factors at their fit. A factor at a bound would mean the data "
              "cannot fix it.", "", "### How Trn2 predictions move across each range", "",
              "Step time in seconds at the range's low end, the fit, and the high end (no published Trn2 training "
              "run constrains these; the interval of a Trn2 prediction carries this, see docs/uncertainty.md).", "",
              "| factor | scenario | low | fit | high |", "| --- | --- | --- | --- | --- |"]
    for name, ident in res["identifiability"].items():
        for label, (a, b, c) in ident["trn2_step_time_s"].items():
            lines.append(f"| `{name}` | {label} | {a} | {b} | {c} |")
    lines += ["", "## Layouts", "",
              "| layout | quality | fitted | published median seq/s | predicted | error | leave-one-out error |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for n, r in L.items():
        cve = f"{r['cv_error_pct']:+.1f} %" if "cv_error_pct" in r else "–"
        lines.append(f"| {n} | {r['quality']} | {'yes' if r['fitted'] else 'no'} | {r['median_seq_per_s']:g} | "
                     f"{r['predicted_seq_per_s']:.2f} | {r['error_pct']:+.1f} % | {cve} |")
    lines += ["", f"Leave-one-layout-out cross-validation over the {len(cv['folds'])} fitted layouts: median "
              f"|error| {cv['median_abs_error_pct']:.1f} %, worst {cv['worst_abs_error_pct']:.1f} %. This is the "
              "figure to expect on a layout nobody has measured.", "",
              "Factors refitted in each fold:", "", "| left out | " + " | ".join(f"`{b[0]}`" for b in FIT) + " |",
              "| --- |" + " --- |" * len(FIT)]
    for n, f in cv["folds"].items():
        lines.append(f"| {n} | " + " | ".join(f"{f[b[0]]:.3g}" for b in FIT) + " |")
    t2 = res.get("trn2")
    if t2:
        lines += ["", "## Trainium2 (`" + t2["row"] + "`)", "",
                  f"The one published Trn2 training run ({t2['published_step_s']} s per step) fits "
                  f"`{t2['factor']}` = {t2['value']:g} (the Trn1 value, 1, predicts {t2['step_before_s']} s; the fit "
                  f"{t2['step_s']} s, {t2['error_pct']:+.1f} %). One row cannot separate it from the other Trn2 factors: "
                  f"its range is the argued {t2['argued_range'][0]:g} – {t2['argued_range'][1]:g} (docs/trn2.md). "
                  "Every Trn2 uncertain factor is narrowed to the part of its range over which this row stays within "
                  "the release spread (the other factors at their values); docs/uncertainty.md uses these ranges:", "",
                  "| factor | pinned range |", "| --- | --- |"]
        for fname, (a, b) in t2["pinned"].items():
            lines.append(f"| `{fname}` | {a:g} – {b:g} |")
    sc = res.get("scaling")
    if sc:
        lines += ["", "## Data-parallel scaling (same-release pairs)", "",
                  f"Seq/s per instance of `{sc['large']}` over that of `{sc['small']}` (the same TP8 replica, 16 "
                  "microbatches each), as the releases that printed both published it, and as the model predicts it "
                  "(on trn1.32xlarge, 800 Gbit/s EFA, as those releases ran).", "",
                  "| release | rows | published | model |", "| --- | --- | --- | --- |"]
        for sdk, pr in sc["pairs"].items():
            lines.append(f"| {sdk} | {', '.join(pr['rows'])} | {pr['published_pct']:.1f} % | {sc['predicted_pct']:.1f} % |")
        lines.append(f"| median | | {sc['median_pct']:.1f} % | {sc['predicted_pct']:.1f} % |")
    cov = res["interval_coverage"]
    lines += ["", "## Interval coverage (cross-validated)", "",
              f"The 80 % interval (docs/uncertainty.md) around each layout's leave-one-out prediction, its fit part "
              f"from the other folds only, holds {cov['rows_covered']} of the {cov['rows']} published rows "
              f"({cov['coverage_pct']:.0f} %) and {cov['layout_medians_covered']} of the {cov['layouts']} layout "
              f"medians; its median full width (high / low - 1) is {cov['median_full_width_pct']:.0f} % on Trn1."]
    lines += ["", "## Every published row", "",
              "Error of the layout's prediction against each release's figure, beside the layout's median.", "",
              "| row | layout | SDK | quality | published seq/s | layout median | error vs row |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in lay_rows:
        err = "ratio only (above)" if r["quality"] == "pair" else f"{res['rows'][r['id']]:+.1f} %"
        lines.append(f"| {r['id']} | {r['layout']} | {r['sdk']} | {r['quality']} | {r['seq_per_s']} | "
                     f"{L[r['layout']]['median_seq_per_s']:g} | {err} |")
    names = list(L)
    lines += ["", "## Ablation", "",
              "Each mechanism switched off in turn (its `Calibration` switch), the factors refitted: error per "
              "layout and RMS over the fitted layouts. The first row is the full model.", "",
              "| mechanism off | RMS | " + " | ".join(names) + " |", "| --- | --- |" + " --- |" * len(names),
              f"| (none) | {100 * res['rms_log_error']:.1f} % | " + " | ".join(f"{L[n]['error_pct']:+.1f} %" for n in names) + " |"]
    for m, a in res["ablation"].items():
        lines.append(f"| {a['label']} (`{m}={a['off']}`) | {a['rms_pct']:.1f} % | "
                     + " | ".join(f"{a['error_pct'][n]:+.1f} %" for n in names) + " |")
    lines.append("")
    return "\n".join(lines)


def scenario_files(data: Path) -> dict[Path, str]:
    """`scenarios/calib-<layout>.yaml` for every layout: the scenario the fit predicts, with its median."""
    import yaml

    lay_rows = rows(data)
    out = {}
    groups: dict[str, list[dict]] = {}
    for r in lay_rows:
        groups.setdefault(r["layout"], []).append(r)
    for name, rs in groups.items():
        doc = scenario_of(rs[0])
        doc["name"] = f"calib-{name}"
        doc["training"].update(steps=2, warmup_steps=1)
        doc.pop("emulation")
        vals = sorted(float(r["seq_per_s"]) for r in rs)
        head = (f"# Calibration layout `{name}` of data/calibration/training.csv ({rs[0]['quality']}): "
                f"{rs[0]['model']} on {rs[0]['instances']} x {rs[0]['instance']},\n# {rs[0]['stack']}, published "
                f"median {statistics.median(vals):g} seq/s over {len(vals)} release(s) (range {vals[0]:g}-{vals[-1]:g}). "
                f"Generated by scripts/calibrate.py.\n")
        out[REPO / "scenarios" / f"calib-{name}.yaml"] = head + yaml.safe_dump(doc, sort_keys=False)
    return out


def outputs(data: Path) -> tuple[str, str]:
    res = results(data)
    return json.dumps(res, indent=2) + "\n", render(res, data)


def splice(doc: str, section: str) -> str:
    """The hand-written part of docs/calibration.md (mechanisms and assumptions) is kept below the generated
    tables, after the marker line."""
    marker = "<!-- hand-written below: mechanisms and assumptions -->"
    tail = doc.split(marker, 1)[1] if marker in doc else "\n"
    return section + "\n" + marker + tail


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the committed fit is stale")
    ap.add_argument("--data", type=Path, default=DATA)
    args = ap.parse_args()
    fitted, section = outputs(args.data)
    doc = splice(DOC.read_text() if DOC.exists() else "", section)
    files = {FITTED: fitted, DOC: doc, **scenario_files(args.data)}
    if args.check:
        stale = [p.name for p, text in files.items() if not p.exists() or p.read_text() != text]
        print("stale: " + ", ".join(stale) if stale else "calibration is up to date")
        return 1 if stale else 0
    for path, text in files.items():
        path.write_text(text)
    print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
