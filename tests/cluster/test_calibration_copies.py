"""`Calibration.with_` and `NetworkCalibration.with_` copy the instance's fields into a new one instead of calling
`dataclasses.replace` (an interval makes about fifty settings): the copy is the instance `replace` makes, equal,
hashing alike and pickling alike, the original untouched, and an unknown name is still refused."""
from __future__ import annotations

import dataclasses
import pickle

import pytest

from ultracluster.calibration.factors import Calibration, NetworkCalibration
from ultracluster.calibration.fitted_files import fitted


@pytest.mark.parametrize("changes", [{"tensor_efficiency": 0.41}, {"efa_efficiency": 0.6},
                                     {"tensor_efficiency": 0.41, "efa_efficiency": 0.6, "reduce_step_s": 2e-6},
                                     {}])
def test_with_is_replace(changes):
    cal = fitted()
    before = dict(vars(cal))
    net = {k: v for k, v in changes.items() if hasattr(cal.network, k)}
    chip = {k: v for k, v in changes.items() if k not in net}
    want = dataclasses.replace(cal, **chip, network=dataclasses.replace(cal.network, **net))
    got = cal.with_(**changes)
    assert type(got) is Calibration and type(got.network) is NetworkCalibration
    assert got == want and hash(got) == hash(want) and list(vars(got)) == list(vars(want))
    assert pickle.loads(pickle.dumps(got)) == want
    assert vars(cal) == before                  # the original is not changed
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.tensor_efficiency = 0.5             # still frozen


def test_an_unknown_name_is_refused():
    with pytest.raises(TypeError, match="no_such_factor"):
        fitted().with_(no_such_factor=1.0)
    with pytest.raises(TypeError, match="no_such_factor"):
        fitted().network.with_(no_such_factor=1.0)
