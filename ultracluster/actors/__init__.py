"""Ray actors standing in for instances, UltraServers or folded shards, and for the shared file system.

Only this package imports Ray: `launch` (shard actors, placement, the engine's shard set), `storage_actor`
(one actor per file system) and `metrics` (ray.util.metrics for Grafana). `shard` and `local` are pure:
the same ShardWorker runs inside an actor or in this process.
"""
