"""The Ray adapter: Ray actors standing in for instances, UltraServers or folded shards, and for the shared file
system; the planner's and the sweep's Ray tasks; the run's metrics.

Only this package imports Ray: `launch` (shard actors, placement, the engine's shard set), `auth` (token
authentication), `plan_tasks` (Ray tasks), `storage_actor` (one actor per file system) and `metrics`
(ray.util.metrics for Grafana). What runs inside the shard actors is pure and lives in `ultracluster.shards`.
"""
