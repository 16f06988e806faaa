"""The package's units and their multiples, in one place.

Every quantity inside ultracluster is SI: bytes, bytes/s, flop/s, seconds, hertz. The public sources quote
binary multiples (GiB of HBM, MiB of a collective's message) and network rates in Gbit/s; these constants turn
them into bytes and bytes/s. AWS's "MB/s" and "GB" of FSx are decimal (MB, GB).
"""
from __future__ import annotations

KIB = 2**10            # bytes
MIB = 2**20
GIB = 2**30
TIB = 2**40
MB = 1e6               # decimal, as AWS quotes storage throughput
GB = 1e9
GBPS = 1e9 / 8         # bytes/s in one Gbit/s
