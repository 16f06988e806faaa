"""Every Trainium2 factor in the uncertain-factor registry moves a Trn2 prediction inside its range, and the
default sits inside the range (no registered factor is dead weight for the interval)."""
import pytest

from ultracluster import load_scenario
from ultracluster.cluster.calibration import DEFAULT
from ultracluster.cluster.uncertain import for_generation
from ultracluster.pipeline import predict

# FP8 matmuls, TP16 over 4 chips (NeuronLink and chip DMA), DP over 2 instances (EFA)
SCENARIO = {"name": "trn2-factors", "model": {"preset": "llama2-7b", "layers": 8},
            "training": {"seq_len": 4096, "global_batch": 16, "precision": "fp8", "steps": 1, "warmup_steps": 0},
            "parallelism": {"tp": 16, "pp": 2}, "cluster": {"instance": "trn2.48xlarge", "instances": 2},
            "faults": {"jitter": 0.0}}
FACTORS = for_generation("trainium2")


def _central(name: str) -> float:
    return getattr(DEFAULT.network, name) if hasattr(DEFAULT.network, name) else getattr(DEFAULT, name)


@pytest.mark.parametrize("factor", FACTORS, ids=[f.name for f in FACTORS])
def test_each_trn2_factor_moves_the_step_inside_its_range(factor):
    sc = load_scenario(SCENARIO)
    assert factor.low <= _central(factor.name) <= factor.high and factor.low < factor.high
    low = predict(sc, DEFAULT.with_(**{factor.name: factor.low}))["step_time_s"]
    high = predict(sc, DEFAULT.with_(**{factor.name: factor.high}))["step_time_s"]
    central = predict(sc, DEFAULT)["step_time_s"]
    assert low != high
    assert min(low, high) <= central <= max(low, high)
