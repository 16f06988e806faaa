"""`ultracluster plan`: the layout planner, a scenario's model and job → every valid layout timed → the best
replayed → a plan directory (docs/plan.md).

The package by job: `command` (`plan`, the composition root: the search, Ray tasks, the replays of the best with
`runner.run`), `result` (`PlanResult`, what it returns), `options` (the flags checked, the times resolved),
`budget` (days and dollars of a training budget), `compare` (each layout against the scenario's own), `output`
(the plan directory and the terminal's text), `html` (plan.html), `text` (the words both share). The pure search
and timing live in `ultracluster.layouts`, below this command (which sits above `runner`). This module only
gathers the public names.
"""
from __future__ import annotations

from ..layouts.space import SearchSpace, parse_instance_types, parse_instances, parse_prices, search_space
from .command import DEFAULT_HBM_HEADROOM, plan
from .options import MAX_SEARCH_MINUTES, MAX_TOP
from .output import format_plan
from .result import PlanResult

__all__ = ["DEFAULT_HBM_HEADROOM", "MAX_SEARCH_MINUTES", "MAX_TOP", "PlanResult", "SearchSpace", "format_plan",
           "parse_instance_types", "parse_instances", "parse_prices", "plan", "search_space"]
