"""The shard workers, pure: one shard of the cluster (its instances' chip model, jitter, stragglers and its part of
the gradient payload exchange) as plain Python over numpy.

`worker` is the `ShardWorker` a Ray actor wraps (`actors.launch`) and that runs in this process for tests,
`predict` and the interval; `local` holds the in-process stand-ins of the shard set and of the file system. No
Ray: the Ray adapter (`ultracluster.actors`) wraps them.
"""
