"""`PlanResult`: a finished plan, what `command.plan` returns and what `output` and `html` write from it."""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd


@dataclass
class PlanResult:
    """A finished plan.

    Attributes:
        table: every layout evaluated, with its figures (plan.csv).
        summary: plan.json.
        top: the best layouts (label, layout, figures), best first.
        yamls: top-N.yaml texts, in the order of `top`.
        replays: the replayed layouts' summary.json dicts, in the order of `top` (empty without replays).
    """

    table: pd.DataFrame
    summary: dict
    top: list[dict] = field(default_factory=list)
    yamls: list[str] = field(default_factory=list)
    replays: list[dict] = field(default_factory=list)
