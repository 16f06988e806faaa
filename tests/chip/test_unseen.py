"""Intervals where no row was seen: an unseen (stack, pipelined or not) cell is flagged and widened by the
leave-one-group-out error; a chip generation with no measured run is never more certain than the one it borrows
its factors from."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from ultracluster import load_scenario
from ultracluster.calibration.fitted_files import fitted_document
from ultracluster.runner import predict
from ultracluster import uncertainty as unc

REPO = Path(__file__).resolve().parents[2]
CALIB_NXD = REPO / "scenarios" / "calib-llama2-7b-tp8.yaml"


def test_the_shipped_domain_records_the_cells_of_the_fitted_rows():
    cells = fitted_document()["domain"]["trainium"]["cell"]
    assert "neuronx-distributed/pipeline" in cells and "neuronx-nemo-megatron/pipeline" in cells
    assert "megatron-lm-neuron/pipeline" not in cells


def test_an_unseen_cell_is_flagged_and_widened_by_the_group_out_error():
    seen = load_scenario(CALIB_NXD)
    unseen = load_scenario(CALIB_NXD, ["stack=custom"])      # the same knobs, a cell no row ran
    assert "cell" not in unc.extrapolated(seen, "trainium")
    assert unc.extrapolated(unseen, "trainium") == ["cell"]
    ev = unc.evidence()
    h_seen, h_unseen = unc.half_width(ev, []), unc.half_width(ev, ["cell"])
    cell = math.log1p(fitted_document()["group_out"]["cells"]["worst_abs_error_pct"] / 100)
    assert h_unseen == pytest.approx(math.hypot(h_seen, cell), rel=1e-12)
    assert h_unseen > h_seen


def test_the_plan_weights_an_unseen_cell_as_the_run_does():
    import numpy as np

    value = {"tp": np.array([8, 8]), "pp": np.array([1, 4]), "cp": np.array([1, 1]), "seq_len": 4096,
             "params_b": 6.7, "zero": np.array([0, 0]), "recompute": np.array(["none", "none"], dtype=object),
             "cell": unc.cell("megatron-lm-neuron", np.array([1, 4]))}
    text, count = unc.extrapolated_columns(value, "trainium")
    assert list(text) == ["", "cell"]
    ev = unc.evidence()
    assert unc.half_width(ev, count)[1] == pytest.approx(unc.half_width(ev, ["cell"]), rel=1e-12)


def test_trainium3_is_never_more_certain_than_trainium2_on_the_same_job():
    bands = {}
    for name in ("llama3.1-70b-trn2-ultraserver", "llama3.1-70b-trn3-gen1"):
        r = predict(load_scenario(REPO / "scenarios" / f"{name}.yaml"), intervals=True)
        bands[name] = r["step_time_high_s"] / r["step_time_low_s"]
    assert bands["llama3.1-70b-trn3-gen1"] >= bands["llama3.1-70b-trn2-ultraserver"], bands
