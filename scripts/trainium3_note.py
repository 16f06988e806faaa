"""Trn3 against Trn2 and MXFP8 against BF16, with the interval Trainium3's uncertain factors give.

Prints the tables of docs/trainium3.md "What the model predicts": Llama-3.1-70B (TP32 PP4 DP32, seq 8192,
LNC=2) on 64 trn3.48xlarge in Gen1 UltraServers and on 64 trn2u.48xlarge, each Trn3 prediction with the
step time at the low and the high end of every factor registered for "trainium3"
(`ultracluster.uncertain_factors`) and at the two corners that move them all towards a slower or a faster
step. No Trn3 run is published, so the corners are the interval; the interval machinery of the package
(docs/uncertainty.md, once it exists) supersedes this script.

    python scripts/trainium3_note.py            # about 10 s
"""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ultracluster.calibration.fitted_files import DEFAULT  # noqa: E402
from ultracluster.uncertain_factors import for_generation  # noqa: E402
from ultracluster.runner import predict  # noqa: E402
from ultracluster.scenario import load_scenario  # noqa: E402

TRN3 = REPO / "scenarios" / "llama3.1-70b-trn3-gen1.yaml"
TRN2 = REPO / "scenarios" / "llama3.1-70b-trn2-ultraserver.yaml"
RUN = ["training.steps=1", "training.warmup_steps=0"]


def step(path: Path, sets: list[str], **factors: float) -> float:
    return predict(load_scenario(path, RUN + sets), DEFAULT.with_(**factors))["step_time_s"]


def interval(path: Path, sets: list[str]) -> tuple[float, float, float, list[tuple[str, float, float, float, float]]]:
    """(central, fastest corner, slowest corner, per factor (name, low, high, step at low, step at high))."""
    central = step(path, sets)
    rows, slow, fast = [], {}, {}
    for f in for_generation("trainium3"):
        at_low, at_high = step(path, sets, **{f.name: f.low}), step(path, sets, **{f.name: f.high})
        rows.append((f.name, f.low, f.high, at_low, at_high))
        slow[f.name], fast[f.name] = (f.low, f.high) if at_low >= at_high else (f.high, f.low)
    return central, step(path, sets, **fast), step(path, sets, **slow), rows


def ratio_interval(num: tuple[Path, list[str]], den: tuple[Path, list[str]]) -> tuple[float, float, float]:
    """num's step over den's at the central calibration and at the two corners of the Trainium3 factors that
    move the ratio most; every factor is applied to both runs (those shared with other chips, such as
    chip_efficiency, move both; the _trn3 ones touch only Trainium3)."""
    def r(**f: float) -> float:
        return step(*num, **f) / step(*den, **f)

    lo, hi = {}, {}
    for f in for_generation("trainium3"):
        a, b = r(**{f.name: f.low}), r(**{f.name: f.high})
        lo[f.name], hi[f.name] = (f.low, f.high) if a <= b else (f.high, f.low)
    return r(), r(**lo), r(**hi)


def main() -> None:
    trn2 = step(TRN2, [])
    bf16, bf16_fast, bf16_slow, rows = interval(TRN3, [])
    mx, mx_fast, mx_slow, mx_rows = interval(TRN3, ["training.precision=mxfp8"])
    print("| run | step (s) | fastest corner (s) | slowest corner (s) |\n| --- | --- | --- | --- |")
    print(f"| Trn2 UltraServers, BF16 | {trn2:.2f} | | |")
    print(f"| Trn3 Gen1, BF16 | {bf16:.2f} | {bf16_fast:.2f} | {bf16_slow:.2f} |")
    print(f"| Trn3 Gen1, MXFP8 | {mx:.2f} | {mx_fast:.2f} | {mx_slow:.2f} |")
    print()
    print(f"Trn3/Trn2 speed-up (BF16), Trn2 at its central value: {trn2 / bf16:.2f}x, interval "
          f"{trn2 / bf16_slow:.2f}x to {trn2 / bf16_fast:.2f}x")
    c, lo, hi = ratio_interval((TRN2, []), (TRN3, []))
    print(f"Trn3/Trn2 speed-up (BF16), each factor on both runs: {c:.2f}x, interval {lo:.2f}x to {hi:.2f}x")
    c, lo, hi = ratio_interval((TRN3, []), (TRN3, ["training.precision=mxfp8"]))
    print(f"MXFP8 over BF16 on Trn3, each factor on both runs: {c:.2f}x, interval {lo:.2f}x to {hi:.2f}x")
    print(f"MXFP8 over BF16 on Trn3: {bf16 / mx:.2f}x, at the corners {bf16_slow / mx_slow:.2f}x (slow) and "
          f"{bf16_fast / mx_fast:.2f}x (fast); matmuls alone: 2,517/671 = {2517 / 671:.2f}x to 2,517/632 = "
          f"{2517 / 632:.2f}x")
    print(f"Trn3 MXFP8 over Trn2 BF16: {trn2 / mx:.2f}x, interval {trn2 / mx_slow:.2f}x to {trn2 / mx_fast:.2f}x")
    print()
    print("| factor | low | high | BF16 step at low (s) | at high (s) | MXFP8 step at low (s) | at high (s) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for (name, low, high, a, b), (_, _, _, c, d) in zip(rows, mx_rows):
        print(f"| `{name}` | {low:.4g} | {high:.4g} | {a:.2f} | {b:.2f} | {c:.2f} | {d:.2f} |")


if __name__ == "__main__":
    main()
