"""What the collective model's algorithm choice may return, for the property tests of this folder."""
import pytest

from ultracluster.network import collective_time
from ultracluster.network import timing


def _choices(cluster, op, nbytes, group):
    """The algorithms Neuron's size switches give this collective at its own size and just over each later switch
    (each priced with the envelope off, `algorithm_envelope` 0): with the envelope on, the model runs the
    cheapest of these at this size, so faster links may change which one it names but never make it slower."""
    plain = cluster.calibration.network.with_(algorithm_envelope=0.0)
    fab = timing.fabric_of(cluster)
    sizes = [float(nbytes)] + timing.breakpoints(fab, op, float(nbytes), group, above=True)
    return {collective_time(cluster, op, s, group, plain)[1] for s in sizes}


@pytest.fixture(scope="session")
def envelope_choices():
    return _choices
