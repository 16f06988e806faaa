"""The shipped chip calibration's data and fit: the published training runs of `data/calibration/training.csv`,
the scenario each row describes, and the fit of the chip factors to the layouts' medians.

Rows are grouped by `layout`; each layout's target is the median `seq_per_s` over the Neuron releases that
published it, and only layouts whose `quality` is not `uncertain` are fitted. For each layout the scenario is built
from its row's own columns and predicted in-process (`ultracluster.runner.predict`, no Ray).

The fitted factors (FIT) minimise the sum over layouts of log(predicted / median)^2, by bounded least
squares (`scipy.optimize.least_squares`) from fixed starts inside each factor's physical bounds; every other factor keeps the value
`ultracluster/calibration/factors.py` documents. `ultracluster.calibrate.shipped` cross-validates and ablates,
`ultracluster.calibrate.page` writes the tables; `scripts/calibrate.py` runs them (docs/calibration.md). Reads
files of a repository checkout (data/calibration/), never at import.
"""
from __future__ import annotations

import copy
import csv
import math
import re
import statistics
from pathlib import Path

import numpy as np


REPO = Path(__file__).resolve().parents[2]
FITTED = REPO / "ultracluster" / "calibration" / "calibration.json"
DOC = REPO / "docs" / "calibration.md"
DATA = REPO / "data" / "calibration"

# The fitted factors: (name, lower bound, upper bound, start, scale of the search's first step, unit shown)
FIT = (
    ("tensor_efficiency", 0.2, 1.0, 0.7, 0.15, ""),
    ("in_graph_sync_s", 0.0, 5e-3, 0.5e-3, 0.5e-3, "ms"),
)
# The stack engines' cost per graph execution (`graph_s_nxd`, `graph_s_nemo`): not fitted, 0 in the shipped fit. A
# pipeline engine costs what its exchanges cost (each a collective over the stage pair on both stages' timelines,
# with its in-graph synchronisation: `Calibration.serial_exchanges`), and the runtime queues the next graphs while
# one runs (NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS in the pipeline scripts); the rows cannot tell a further cost
# per graph from nothing. The script refits them beside FIT once to show it (ENGINE_CHECK: their values and
# identifiable ranges); a user's profile may still fit them (`calibrate.fit`)
ENGINE_CHECK = (
    ("graph_s_nxd", 1e-5, 20e-3, 1e-3, 2e-3, "ms"),
    ("graph_s_nemo", 1e-5, 20e-3, 1e-3, 2e-3, "ms"),
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
    ("pipeline exchanges on both stages' timelines", "serial_exchanges", False),
    ("gradient-norm clipping", "step_costs", False),
    ("cheapest collective algorithm around a switch", "algorithm_envelope", 0.0),
    ("in-graph collective synchronisation", "in_graph_sync_s", 0.0),
)
# Trn2 scenarios whose movement across each factor's plausible range the identifiability table shows
TRN2_PROBES = (
    ("llama2-70b TP32 PP4 DP32, 64 x trn2.48xlarge",
     {"name": "probe-l70-trn2", "stack": "neuronx-distributed", "model": {"preset": "llama2-70b"},
      "training": {"seq_len": 4096, "global_batch": 1024, "micro_batch": 1, "steps": 1, "warmup_steps": 0,
                   "attention": "flash"},
      "parallelism": {"tp": 32, "pp": 4, "dp": 32}, "cluster": {"instance": "trn2.48xlarge", "instances": 64},
      "emulation": {"instances_per_actor": 64}}),
    ("llama3.1-8b TP8 DP64, 8 x trn2.48xlarge",
     {"name": "probe-l8-trn2", "stack": "neuronx-distributed", "model": {"preset": "llama3.1-8b"},
      "training": {"seq_len": 8192, "global_batch": 1024, "micro_batch": 1, "steps": 1, "warmup_steps": 0},
      "parallelism": {"tp": 8, "pp": 1, "dp": 64}, "cluster": {"instance": "trn2.48xlarge", "instances": 8},
      "emulation": {"instances_per_actor": 8}}),
)
# The data the fit reads (its staleness test also re-predicts every layout, which catches model changes)
INPUTS = ("data/calibration/training.csv", "operators/transformer.yaml", "ultracluster/network/collectives_fit.json")


def rows(data: Path) -> list[dict]:
    with open(Path(data) / "training.csv", newline="") as f:
        return list(csv.DictReader(f))


# What each training stack runs (its attention kernel, dropout, sequence parallelism, TP overlap, ZeRO stage, LNC,
# pipeline engine) is the scenario's `stack` (ultracluster/stacks.py, with the sources): a row's scenario names
# its stack and gives only what the row itself says (zero1, recompute, master weights).
# Row qualities: fitted as a layout median (FITTED_QUALITIES), fitted only as the ratio inside a same-release
# pair (`pair`), or shown beside the fit and never fitted (`uncertain`; `paper`: the Trainium2 row, which the
# Trn1 factors are not fitted to)
FITTED_QUALITIES = ("table", "log")


def is_fitted(row: dict) -> bool:
    """Whether the fit reads a row as part of its layout's median (a `table` or `log` row on Trn1)."""
    return row["quality"] in FITTED_QUALITIES and row["instance"].startswith("trn1")


def is_read(row: dict) -> bool:
    """Whether the fit reads a row at all: a layout median's row, or a same-release pair's (their ratio)."""
    return is_fitted(row) or row["quality"] == "pair"


def scenario_of(row: dict) -> dict:
    """The scenario a training.csv row describes (1 measured step; the replay is deterministic): the row's stack
    fills what the row does not say (ultracluster/stacks.py)."""
    sharding = {"zero1": row["zero1"] == "true"} if row["zero1"] else {}
    weights = {"master_weights": row["master_weights"]} if row["master_weights"] else {}
    return {
        "name": f"calib-{row['id']}",
        "stack": row["stack"],
        "model": {k: int(row[k]) for k in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab")}
        | {"mlp": row["mlp"], "preset": row["model"]},
        "training": {"seq_len": int(row["seq_len"]), "global_batch": int(row["global_batch"]),
                     "micro_batch": int(row["micro_batch"]), "precision": row["precision"], **weights,
                     **sharding, "recompute": row["recompute"], "steps": 1, "warmup_steps": 0},
        "parallelism": {"tp": int(row["tp"]), "pp": int(row["pp"]), "dp": int(row["dp"])},
        "cluster": {"instance": row["instance"], "instances": int(row["instances"])},
        "emulation": {"instances_per_actor": int(row["instances"])},
    }


# NeuronX Distributed's examples keep gradients in bf16 before SDK 2.20: XLA_DOWNCAST_BF16=1 stores the fp32 .grad
# of the fp32 parameters in bf16 on the device, and the ZeRO-1 optimizer reduce-scatters it as it is (torch-xla's
# ZeroRedundancyOptimizer, higher_cc_precision off). From 2.19 the trainer's use_fp32_grad_acc turns on fp32
# accumulation buffers and higher_cc_precision, and from 2.20 the examples' --use_gpu_compatible_precision (which
# sets it) defaults to 1 (aws-neuron/neuronx-distributed: src/neuronx_distributed/trainer/trainer.py at the 2.19.0
# release; examples/training/llama/tp_pp_llama_hf_pretrain/run_llama_nxd.py and tp_zero1_llama_hf_pretrain.py at
# 2.20.0; the 2.18.0 examples set XLA_DOWNCAST_BF16=1 in run_llama_13B_tp_pp.sh and for --use_mix_precision)
NXD_FP32_GRADS_FROM = (2, 20)


def release(sdk: str) -> tuple[int, int] | None:
    """A Neuron SDK release as (major, minor) ("~2.10" is 2.10; "unknown" None)."""
    m = re.match(r"~?(\d+)\.(\d+)", sdk or "")
    return (int(m[1]), int(m[2])) if m else None


def grad_precision_of(row: dict) -> str | None:
    """The gradients' precision a row's release ran with where it differs from the scenario's default: bf16 for a
    NeuronX Distributed row before SDK 2.20 (NXD_FP32_GRADS_FROM), else None (the default)."""
    r = release(row["sdk"])
    return "bf16" if row["stack"] == "neuronx-distributed" and r is not None and r < NXD_FP32_GRADS_FROM else None


def layout_scenario_of(layout_rows: list[dict]) -> dict:
    """The scenario of a layout (`scenario_of` its first row) with the gradients' precision of its median row (the
    row whose seq/s is nearest the median of its rows, the first of a tie): a layout published by releases on both
    sides of a change is fitted as the releases at its median ran it."""
    doc = scenario_of(layout_rows[0])
    seq = [float(r["seq_per_s"]) for r in layout_rows]
    mid = statistics.median(seq)
    at = min(range(len(seq)), key=lambda i: abs(seq[i] - mid))
    grads = grad_precision_of(layout_rows[at])
    if grads is not None:
        doc["training"]["grad_precision"] = grads
    return doc


class Layouts:
    """The layouts of training.csv: their rows, medians, spreads, same-release pairs and scenarios.

    A layout is fitted (`certain`) through the median of its `table` and `log` rows on Trn1. Pair rows
    (`pair`: an old release's 1-instance and 16-instance figures printed side by side) enter only as the
    ratio inside each pair, the data-parallel scaling efficiency, which no release drift touches; the pairs'
    target is the median of those ratios (`scaling`). Uncertain and paper rows are predicted and shown only.
    """

    def __init__(self, data: Path):
        from ..scenario import load_scenario

        self._read(rows(data))
        self.scenarios = {n: load_scenario(layout_scenario_of(self.rows_by_scenario[n])) for n in self.names}
        self.cell = {n: cell_of(self.scenarios[n]) for n in self.names}
        self.family = {n: family_of(self.rows_by_scenario[n][0]["model"]) for n in self.names}

    def _read(self, all_rows: list[dict]) -> None:
        """Everything that follows from the rows themselves: layouts, fitted rows, medians, spread, pairs."""
        self.rows = all_rows
        rows_by_scenario: dict[str, list[dict]] = {}
        for r in self.rows:
            rows_by_scenario.setdefault(r["layout"], []).append(r)
        self.names = list(rows_by_scenario)
        self.rows_by_scenario = rows_by_scenario
        self.fit_rows = {n: [r for r in rs if is_fitted(r)] for n, rs in rows_by_scenario.items()}
        shown = {n: self.fit_rows[n] or [r for r in rs if r["quality"] != "pair"] or rs for n, rs in rows_by_scenario.items()}
        self.median = {n: statistics.median(float(r["seq_per_s"]) for r in rs) for n, rs in shown.items()}
        self.quality = {n: rs[0]["quality"] for n, rs in shown.items()}
        self.certain = [n for n in self.names if self.fit_rows[n]]
        logs = [np.log([float(r["seq_per_s"]) for r in self.fit_rows[n]]) for n in self.certain
                if len(self.fit_rows[n]) > 1]
        # between-release spread: RMS over layouts of the standard deviation of log seq/s across releases
        self.spread = float(np.sqrt(np.mean([np.var(x, ddof=1) for x in logs]))) if logs else 0.0
        self.pairs = pairs_of(self.rows)
        self.scaling = statistics.median(p["scaling"] for p in self.pairs) if self.pairs else None
        self.pair_layouts = {p[k] for p in self.pairs for k in ("small", "large")}

    def of_rows(self, ids) -> "Layouts":
        """These layouts seen through only the rows whose `id` is in `ids` (a validation fold's fit): their
        fitted rows, medians and pairs from those rows alone; the scenarios, cells and families kept."""
        keep = set(ids)
        sub = copy.copy(self)
        sub._read([r for r in self.rows if r["id"] in keep])
        return sub

    def predict(self, calibration, names=None) -> np.ndarray:
        from ..job import Job, evaluate

        jobs = [Job.of(self.scenarios[n]) for n in (names or self.names)]
        return np.array([f["seq_per_s"] for f in evaluate(jobs, calibration, "replay")])

    def predicted_scaling(self, calibration) -> float:
        """The model's data-parallel scaling efficiency of the pairs' layouts: seq/s of the large run per
        instance over seq/s of the small run per instance."""
        p = self.pairs[0]
        small, large = self.predict(calibration, [p["small"], p["large"]])
        return float((large / p["large_instances"]) / (small / p["small_instances"]))

    def log_errors(self, calibration, names, scaling: bool = True) -> np.ndarray:
        """Log errors of the named layouts' medians, and of the pairs' median scaling when there are pairs (and
        `scaling`)."""
        err = np.log(self.predict(calibration, names) / np.array([self.median[n] for n in names]))
        if self.scaling is None or not scaling:
            return err
        return np.append(err, math.log(self.predicted_scaling(calibration) / self.scaling))


def cell_of(scenario) -> str:
    """The (stack, pipelined or not) cell a scenario's layout lies in: what a stack's engine and defaults change
    between a layout with a pipeline and one without (`domain.cell`)."""
    from ..domain import cell

    return cell(scenario.stack, scenario.parallelism.pp)


def family_of(model: str) -> str:
    """A model's family: its preset name without the size (llama2-13b -> llama2, gpt3-6.7b -> gpt3)."""
    return re.sub(r"-[0-9.]+[bm].*$", "", model)


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
    from ..calibration.fitted_files import DEFAULT

    return DEFAULT.with_(**{RESIDUAL_CHECK[0]: 0.0, **changes})


def rounded(v: float) -> float:
    return float(f"{v:.3g}")


def engine_ties(lay: Layouts, names, free) -> dict:
    """The stack engines' graph costs (`graph_s_*`) that no pipelined layout among `names` sees: each is tied to
    an engine cost that one does (an engine with no pipelined row is timed like one that has them), or held at
    its lower bound when none does. {factor: the factor it follows, or a value}."""
    from ..stacks import STACKS

    engines = {b[0]: b for b in free if b[0].startswith("graph_s_")}
    seen = {STACKS[lay.scenarios[n].stack].engine.graph_factor for n in names
            if lay.scenarios[n].parallelism.pp > 1}
    fitted = [k for k in engines if k in seen]
    return {k: (fitted[0] if fitted else engines[k][1]) for k in engines if k not in seen}


POLISH_STEP = 1.03     # the rounded fit is moved by this factor while a move lowers the loss (tests/chip)


def polish(lay: Layouts, names, params: dict, factors: tuple = FIT) -> tuple[dict, float]:
    """The fit's factors after rounding to 3 significant digits, moved one at a time by POLISH_STEP (up or down,
    inside their bounds) while that lowers the loss: where the loss is flat in a factor (an engine cost of a few
    0.1 ms) rounding the others moves its optimum by more than the search's tolerance. Returns the factors and the
    RMS log error."""
    def loss(p: dict) -> float:
        return float(np.sum(lay.log_errors(base_calibration(**p), names) ** 2))

    best, cur = dict(params), loss(params)
    bounds = {b[0]: (b[1], b[2]) for b in factors}
    for _ in range(8):
        moved = False
        for k in [k for k in best if k in bounds and bounds[k][0] < best[k] < bounds[k][1]]:
            for step in (POLISH_STEP, 1 / POLISH_STEP):
                trial = {**best, k: rounded(min(max(best[k] * step, bounds[k][0]), bounds[k][1]))}
                if trial[k] != best[k] and (x := loss(trial)) < cur - 1e-12:
                    best, cur, moved = trial, x, True
                    break
        if not moved:
            break
    n = len(lay.log_errors(base_calibration(**best), names))
    return best, math.sqrt(cur / n)


def fit(lay: Layouts, names, switches: dict | None = None, factors: tuple = FIT,
        scaling: bool = True) -> tuple[dict, float]:
    """Fitted factors (3 significant digits) and the RMS log error over `names`, mechanisms as `switches`
    (a fitted factor given in `switches` is held at that value); `factors`: the free factors' bounds.

    Bounded nonlinear least squares (`scipy.optimize.least_squares`, trust-region reflective, forward differences)
    on the log errors, from fixed starts: deterministic. A factor the named layouts do not move (an engine term
    whose stack has no row among them) stays at its start; hold it through `switches` to give it a value."""
    from scipy.optimize import least_squares

    held = {b[0]: switches[b[0]] for b in factors if switches and b[0] in switches}
    ties = engine_ties(lay, names, [b for b in factors if b[0] not in held])
    free = tuple(b for b in factors if b[0] not in held and b[0] not in ties)
    others = {k: v for k, v in (switches or {}).items() if k not in held}
    if not free:
        err = lay.log_errors(base_calibration(**others, **held), names, scaling)
        return dict(held), float(np.sqrt(np.mean(err ** 2)))
    lo = np.array([b[1] for b in free])
    hi = np.array([b[2] for b in free])

    def params(u: np.ndarray) -> dict:
        out = {**{b[0]: float(v) for b, v in zip(free, lo + (hi - lo) * np.clip(u, 0.0, 1.0))}, **held}
        return {**out, **{k: out[src] if isinstance(src, str) else src for k, src in ties.items()}}

    def residuals(u: np.ndarray) -> np.ndarray:
        return lay.log_errors(base_calibration(**others, **params(u)), names, scaling)

    u0 = (np.array([b[3] for b in free]) - lo) / (hi - lo)
    res = least_squares(residuals, u0, bounds=(0.0, 1.0), method="trf", diff_step=1e-3, xtol=1e-8, ftol=1e-12,
                        gtol=1e-12, max_nfev=200)
    best = {k: rounded(v) for k, v in params(res.x).items()}
    err = lay.log_errors(base_calibration(**others, **best), names, scaling)
    return best, float(np.sqrt(np.mean(err ** 2)))
