"""ultracluster: emulate AWS Trainium training clusters on Ray.

Public API: `load_scenario(path, overrides)` → Scenario; `run(scenario, out=None, address=None)` →
Report (pandas DataFrames: steps, breakdown, memory, collectives, timeline; `summary` dict); `Job.of(path,
overrides)` → one resolved layout and `evaluate(jobs, calibration, fidelity)` → its figures, replayed or fast.

The names are loaded on first use (PEP 562), so importing the pure core (`ultracluster.chip`,
`ultracluster.network`, ...) pulls in neither Ray nor pandas; `tests/test_architecture.py` checks it.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .errors import ScenarioError, UltraclusterError
    from .job import Job, evaluate
    from .runner import run
    from .report import Report
    from .scenario import Scenario, load_scenario

# public name → the module that defines it
_EXPORTS = {
    "Report": ".report", "Scenario": ".scenario", "ScenarioError": ".errors",
    "UltraclusterError": ".errors", "load_scenario": ".scenario", "run": ".runner", "Job": ".job", "evaluate": ".job",
}

__all__ = ["Job", "Report", "Scenario", "ScenarioError", "UltraclusterError", "evaluate", "load_scenario", "run"]


def __getattr__(name: str) -> Any:
    """Import a public name's module when the name is first asked for."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
