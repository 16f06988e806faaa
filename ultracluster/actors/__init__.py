"""Ray actors standing in for instances, UltraServers or folded shards (the only package importing Ray
is `actors.launch`; `actors.shard` and `actors.local` are pure)."""
