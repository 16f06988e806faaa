"""Moved to `ultracluster.shards.worker` (the pure shard workers left the Ray adapter, issue 36): this name stays
only for `plan/__init__.py`'s import of `actor_bytes` until the planner command's move lands; then that import
reads `shards.worker` and this file goes."""
from ..shards.worker import actor_bytes  # noqa: F401
