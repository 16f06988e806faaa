"""The price of an instance, US dollars per instance-hour, and where it comes from: the user's override (the
scenario's `cluster.price_per_hour_usd`, which `--price-per-hour` sets) when given, else the catalog's public
On-Demand price, else none. The one lookup of `run` (`emulate`), the planner (`plan.options.resolve_prices`,
`layouts.evaluator.Evaluator.cluster`) and the summary's `price_source`."""
from __future__ import annotations

from ..cluster.catalog import INSTANCES

CATALOG_PRICE = "catalog (public On-Demand price)"
NO_PRICE_HINT = "no price: set cluster.price_per_hour_usd or --price-per-hour"
"""What every place a cost would show says where no instance price is known."""
OVERRIDE_PRICE = "cluster.price_per_hour_usd"
FLAG_PRICE = "--price-per-hour"
"""The override's source where the command line's `--price-per-hour` set it (cli turns it into that key)."""


def instance_price(instance_type: str, override: float | None = None) -> float | None:
    """US dollars per instance-hour: `override` (a scenario's `cluster.price_per_hour_usd`) when given, else the
    catalog's public price, else None."""
    return float(override) if override is not None else INSTANCES[instance_type].price_per_hour_usd


def price_source(instance_type: str, override: float | None = None, origin: str | None = None) -> str:
    """Where `instance_price` takes the price from: the override (`origin`, where the caller took it from, e.g.
    `FLAG_PRICE`; else `OVERRIDE_PRICE`, the scenario's key), the catalog's public price (`CATALOG_PRICE`), or
    nowhere (`NO_PRICE_HINT`)."""
    if override is not None:
        return origin or OVERRIDE_PRICE
    spec = INSTANCES.get(instance_type)
    return CATALOG_PRICE if spec is not None and spec.price_per_hour_usd is not None else NO_PRICE_HINT
