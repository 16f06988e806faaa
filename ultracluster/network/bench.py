"""`ultracluster collectives`: an nccom-test-like sweep of one collective over sizes, on the emulated fabric.

Arguments → a what-if Cluster (catalog + `--lnc`, `--efa-gbps`, `--neuronlink-gbps` overrides) → one group
of `--ranks` ranks spread evenly over `--instances` instances (consecutive ranks, alone on the fabric,
as nccom-test runs it) → a table of size, time, algbw, busbw and the algorithm Neuron would pick.

Units: sizes in bytes (K/M/G suffixes are powers of two); bandwidths in GB/s = 10^9 bytes/s (nccl-tests'
convention; the Neuron nccom-test tool prints GiB/s, docs/sources.md §3.6).
"""
from __future__ import annotations

import argparse
import csv
import io
import re
import sys
from dataclasses import dataclass

from ..cluster import Cluster, Layout, Links, z_links
from ..cluster.catalog import (INSTANCES, LINK_GBPS_RANGE, LINK_GBPS_WHY, largest_cluster, largest_cluster_text,
                                ranks_per_instance, ultraserver_of)
from ..errors import Problem, ScenarioError
from .algorithms import OPS
from .collectives import Group, bus_factor, collective_time
from ..units import GBPS, GIB, KIB, MIB

# The largest message timed: 1 TiB, several times any Trainium chip's HBM (Trn3: 144 GiB), so no rank could hold
# its buffer; beyond it the sizes leave the model's domain (and a long digit string, float64)
MAX_SIZE_BYTES = 1 << 40

DTYPES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "uint8": 1, "int32": 4, "uint32": 4,
          "int16": 2, "uint16": 2}
OP_ALIASES = {"allr": "all_reduce", "allg": "all_gather", "redsct": "reduce_scatter", "sendrecv": "send_recv",
              "alltoall": "all_to_all"}
SUFFIX = {"": 1, "K": KIB, "M": MIB, "G": GIB}
CSV_COLUMNS = ("op", "ranks", "instances", "bytes", "time_us", "algbw_gb_s", "busbw_gb_s", "algorithm")
DEFAULT_SIZES = "8,1K,64K,1M,16M,64M,256M,1G"


def parse_sizes(text: str) -> list[int]:
    """"8,1K,1M,64M,1G" → bytes. Suffixes K/M/G (optionally KB/KiB...) are powers of two.

    Raises:
        ScenarioError: naming `--sizes`, an entry that is not a positive whole byte count.
    """
    out = []
    for item in (x.strip() for x in str(text).split(",")):
        m = re.fullmatch(r"(\d+)\s*([KMGkmg]?)(?:i?[Bb])?", item)
        value = int(m.group(1)) * SUFFIX[m.group(2).upper()] if m and len(m.group(1)) <= 20 else 0
        if m and value > MAX_SIZE_BYTES or m and len(m.group(1)) > 20:
            raise ScenarioError([Problem("--sizes", item, "byte counts of at most 1024G (1 TiB: more than any "
                                                          "Trainium chip's HBM holds, so no rank has the buffer)")])
        if value <= 0:
            raise ScenarioError([Problem("--sizes", item or text,
                                         "comma-separated byte counts > 0, with optional K, M or G suffixes "
                                         "(powers of two), e.g. 8,1K,1M,64M,1G")])
        out.append(value)
    return out


def bench_cluster(instance: str, instances: int, lnc: int | None = None, efa_gbps: float | None = None,
                  neuronlink_gbps: float | None = None, calibration: str = "default") -> Cluster:
    """A Cluster for costing collectives alone (no model, no actors), with the what-if link overrides and a
    named collective calibration (`calibration.fitted_files.network_calibrations()`).

    Raises:
        ScenarioError: an unknown instance type, an lnc it does not support, non-positive numbers, or an
            unknown calibration name.
    """
    from ..calibration.fitted_files import fitted, network_calibrations, with_network_calibration

    problems = []
    if calibration not in network_calibrations():
        problems.append(Problem("--calibration", calibration, "one of: " + ", ".join(network_calibrations())))
    spec = INSTANCES.get(instance)
    if spec is None:
        problems.append(Problem("--instance", instance, "one of: " + ", ".join(INSTANCES)))
    if instances < 1:
        problems.append(Problem("--instances", instances, "an integer >= 1"))
    elif spec is not None and instances > largest_cluster(spec):    # as `run` and `plan` bound cluster.instances
        problems.append(Problem("--instances", instances, largest_cluster_text(spec)))
    if spec is not None and lnc is not None and lnc not in spec.allowed_lnc:
        problems.append(Problem("--lnc", lnc, f"one of {', '.join(map(str, spec.allowed_lnc))} on {spec.name}"))
    lo, hi = LINK_GBPS_RANGE
    for flag, value in (("--efa-gbps", efa_gbps), ("--neuronlink-gbps", neuronlink_gbps)):
        if value is not None and not lo <= value <= hi:     # the bounds of cluster.network's keys
            problems.append(Problem(flag, value, f"a number of Gbit/s from {lo:g} to {hi:,.0f} ({LINK_GBPS_WHY})"))
    if problems:
        raise ScenarioError(problems)
    assert spec is not None
    lnc = lnc or spec.default_lnc
    us = ultraserver_of(spec)
    ultraserver = us is not None and instances % us.instances == 0
    nl_bytes = neuronlink_gbps * GBPS if neuronlink_gbps else spec.neuronlink_bytes_per_s_per_chip
    links = Links(
        neuronlink_bytes_per_s_per_chip=nl_bytes,
        neuronlink_latency_s=spec.neuronlink_hop_latency_s,
        efa_bytes_per_s=efa_gbps * GBPS if efa_gbps else spec.efa_bytes_per_s,
        efa_latency_s=spec.efa_latency_s,
        **z_links(spec, ultraserver, nl_bytes),
    )
    rpi = ranks_per_instance(spec, lnc)
    return Cluster(instance=spec, instances=instances, lnc=lnc, ultraserver=ultraserver,
                   layout=Layout(tp=1, cp=1, pp=1, dp=instances * rpi), links=links, shards=(),
                   calibration=with_network_calibration(fitted(), calibration))


RANK_UNITS = ("core", "die", "chip")


def rank_stride(cluster: Cluster, rank_per: str = "core") -> int:
    """Global-rank spacing of a bench group's members: every logical core a rank ("core"), one rank per
    die ("die", Trainium3: 2 dies per chip) or one rank per chip ("chip"), as Neuron's Trn3 runtime can lay
    out a collective (T8).

    Raises:
        ScenarioError: naming `--rank-per`, an unknown unit or one the chip does not have.
    """
    k, dies = cluster.ranks_per_chip, cluster.chip.dies
    if rank_per not in RANK_UNITS:
        raise ScenarioError([Problem("--rank-per", rank_per, "one of: " + ", ".join(RANK_UNITS))])
    if rank_per == "die" and (dies < 2 or k % dies):
        raise ScenarioError([Problem("--rank-per", rank_per, f"core or chip on {cluster.instance.name} "
                                     f"({cluster.chip.name}: {dies} die(s) per chip, {k} rank(s) per chip at "
                                     f"lnc {cluster.lnc})")])
    return {"core": 1, "die": k // dies, "chip": k}[rank_per]


def bench_group(cluster: Cluster, ranks: int, op: str, rank_per: str = "core") -> Group:
    """`ranks` ranks spread evenly over the cluster's instances, the first ranks of each (as nccom-test
    places its workers), alone on the fabric; with `rank_per` "die" or "chip" one rank per die or chip.

    Raises:
        ScenarioError: naming `--ranks`, when they do not split evenly or do not fit, or `--rank-per`.
    """
    stride = rank_stride(cluster, rank_per)
    rpi, n = cluster.ranks_per_instance // stride, cluster.instances
    if ranks < 1 or ranks % n or ranks // n > rpi or (op == "send_recv" and ranks != 2):
        allowed = "2 (send/recv is between two ranks)" if op == "send_recv" else \
            f"a multiple of --instances ({n}) with at most {rpi} per instance " \
            f"({cluster.instance.name}, lnc {cluster.lnc}" + (f", one rank per {rank_per})" if stride > 1 else ")")
        raise ScenarioError([Problem("--ranks", ranks, allowed)])
    if op == "send_recv" and n == 2:
        return Group(per_instance=1, instances=2, stride=cluster.ranks_per_instance, together=False)
    return Group(per_instance=ranks // n, instances=n, stride=stride, together=False,
                 instance_step=cluster.ranks_per_instance)


@dataclass(frozen=True)
class Row:
    op: str
    ranks: int
    instances: int
    bytes: int
    time_us: float
    algbw_gb_s: float
    busbw_gb_s: float
    algorithm: str


def sweep(cluster: Cluster, op: str, ranks: int, sizes: list[int], dtype: str = "bf16",
          rank_per: str = "core") -> list[Row]:
    """One row per size: the collective's time and bandwidths (GB/s = 1e9 B/s, nccl-tests factors).

    Raises:
        ScenarioError: naming `--sizes` when a size is not a whole number of `dtype` elements (or, for
            reduce-scatter/all-gather, of ranks x elements), or `--op`/`--dtype`/`--ranks` problems.
    """
    problems = []
    if op not in OPS:
        problems.append(Problem("--op", op, "one of: " + ", ".join(OPS)))
    if dtype not in DTYPES:
        problems.append(Problem("--dtype", dtype, "one of: " + ", ".join(DTYPES)))
    if problems:
        raise ScenarioError(problems)
    group = bench_group(cluster, ranks, op, rank_per)
    unit = DTYPES[dtype] * (ranks if op in ("reduce_scatter", "all_gather", "all_to_all") else 1)
    bad = [s for s in sizes if s % unit]
    if bad:
        raise ScenarioError([Problem("--sizes", ",".join(map(str, bad)),
                                     f"multiples of {unit} bytes ({dtype} elements"
                                     + (f" x {ranks} ranks)" if unit != DTYPES[dtype] else ")"))])
    rows = []
    for size in sizes:
        seconds, alg = collective_time(cluster, op, size, group, in_graph=False)   # one standalone invocation
        algbw = size / seconds / 1e9 if seconds > 0 else 0.0
        rows.append(Row(op, ranks, cluster.instances, size, seconds * 1e6, algbw, algbw * bus_factor(op, ranks), alg))
    return rows


def format_table(rows: list[Row], cluster: Cluster, dtype: str) -> str:
    """nccom-test-like text: size, count, type, time, algbw and busbw in GB/s (1e9 B/s), algorithm."""
    head = (f"# {rows[0].op if rows else ''} over {rows[0].ranks if rows else 0} ranks on {cluster.instances} x "
            f"{cluster.instance.name} (lnc {cluster.lnc}{', UltraServer' if cluster.ultraserver else ''}); "
            f"emulated; bandwidths in GB/s = 1e9 bytes/s")
    lines = [head, f"{'size(B)':>14} {'count(elems)':>14} {'type':>6} {'time(us)':>12} {'algbw(GB/s)':>12} "
             f"{'busbw(GB/s)':>12}  algorithm"]
    for r in rows:
        lines.append(f"{r.bytes:>14} {r.bytes // DTYPES[dtype]:>14} {dtype:>6} {r.time_us:>12.2f} "
                     f"{r.algbw_gb_s:>12.2f} {r.busbw_gb_s:>12.2f}  {r.algorithm}")
    if rows:
        lines.append(f"Avg bus bandwidth: {sum(r.busbw_gb_s for r in rows) / len(rows):.4f} GB/s")
    return "\n".join(lines)


def csv_text(rows: list[Row]) -> str:
    """The rows as CSV with exactly the columns op, ranks, instances, bytes, time_us, algbw_gb_s, busbw_gb_s,
    algorithm (the CLI writes it atomically, under the output rule)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\r\n")
    w.writerow(CSV_COLUMNS)
    for r in rows:
        w.writerow([r.op, r.ranks, r.instances, r.bytes, f"{r.time_us:.4f}", f"{r.algbw_gb_s:.6f}",
                    f"{r.busbw_gb_s:.6f}", r.algorithm])
    return buf.getvalue()


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The `collectives` subcommand's flags."""
    p.add_argument("--instance", default="trn2.48xlarge", help="instance type (default trn2.48xlarge)")
    p.add_argument("--instances", type=int, default=1, help="instances the group spans (default 1)")
    p.add_argument("--ranks", type=int, default=None, help="ranks in the group (default: every rank of the instances)")
    p.add_argument("--op", default="all_reduce",
                   help="all_reduce | reduce_scatter | all_gather | all_to_all | send_recv (nccom-test aliases ok)")
    p.add_argument("--dtype", default="bf16", help="element type: " + ", ".join(DTYPES))
    p.add_argument("--sizes", default=DEFAULT_SIZES, help="comma-separated bytes, K/M/G = powers of two")
    p.add_argument("--lnc", type=int, default=None, help="what-if: physical NeuronCores per rank (trn2: 1 or 2)")
    p.add_argument("--efa-gbps", type=float, default=None, help="what-if: EFA Gbit/s per instance")
    p.add_argument("--neuronlink-gbps", type=float, default=None, help="what-if: NeuronLink Gbit/s per chip")
    p.add_argument("--calibration", default="default",
                   help="collective calibration: default, or trn2-nccom-examples (Trn2 links fitted to the dated "
                        "nccom-test examples; docs/collectives.md)")
    p.add_argument("--rank-per", default="core", choices=None,
                   help="core (default: every logical NeuronCore a rank), die (Trainium3) or chip: one rank per die "
                        "or per chip")
    p.add_argument("--csv", default=None, metavar="FILE", help="also write the rows as CSV")
    p.add_argument("--force", action="store_true", help="replace an existing --csv FILE")


def run_cli(args: argparse.Namespace, out=None) -> tuple[int, str | None]:
    """Run the subcommand: (exit code, the CSV's text with --csv, else None); bad arguments raise ScenarioError
    (the CLI prints them and exits 2)."""
    sizes = parse_sizes(args.sizes)
    cluster = bench_cluster(args.instance, args.instances, args.lnc, args.efa_gbps, args.neuronlink_gbps,
                            args.calibration)
    op = OP_ALIASES.get(args.op, args.op)
    ranks = args.ranks if args.ranks is not None else cluster.ranks // rank_stride(cluster, args.rank_per)
    rows = sweep(cluster, op, ranks, sizes, args.dtype, args.rank_per)
    print(format_table(rows, cluster, args.dtype), file=out or sys.stdout)
    return 0, csv_text(rows) if args.csv else None
