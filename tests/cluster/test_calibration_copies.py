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


def test_the_kept_hash_stays_in_its_process():
    """A calibration keeps its hash once computed (an interval looks it up ~1,500 times), but a pickled or copied one
    leaves it behind: a hash is only good in the process that computed it (a str field would differ in another)."""
    import copy

    cal = fitted().with_(tensor_efficiency=0.41)
    h = hash(cal)
    assert vars(cal)["_hash"] == h and vars(cal.network).get("_hash") is not None
    for twin in (pickle.loads(pickle.dumps(cal)), copy.deepcopy(cal)):
        assert "_hash" not in vars(twin) and "_hash" not in vars(twin.network)
        assert twin == cal and hash(twin) == h
    shallow = copy.copy(cal)                    # shares its network part, hash and all
    assert "_hash" not in vars(shallow) and shallow.network is cal.network and hash(shallow) == h
