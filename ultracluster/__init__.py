"""ultracluster: emulate AWS Trainium training clusters on Ray.

Public API: `load_scenario(path, overrides)` → Scenario; `run(scenario, out=None, address=None)` →
Report (pandas DataFrames: steps, breakdown, memory, collectives, timeline; `summary` dict).
"""
from .errors import ScenarioError, UltraclusterError
from .pipeline import run
from .report import Report
from .scenario import Scenario, load_scenario

__all__ = ["Report", "Scenario", "ScenarioError", "UltraclusterError", "load_scenario", "run"]
