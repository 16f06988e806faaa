"""Command line → runner (or planner, calibrate) → exit code. Thin: parse, call, print, exit.

Exit codes: 0 ok; 2 bad input (every problem printed with its path; a run directory another run holds, or one
holding an earlier run without --force);
3 the layout is infeasible (summary.json still written, with the reason); 4 a runtime failure (Ray, a dead
actor); 130, 143, 129 interrupted by SIGINT, SIGTERM, SIGHUP (128 + the signal; steps.csv keeps the finished
steps, no summary.json).
`report RUN_DIR` exits 0, 2 when the directory cannot be read or a file in it is malformed, 3 when the run
was infeasible; `compare`
exits 0 or 2 (also for an --out holding an earlier comparison, without --force); `collectives` exits 0, or 2 for bad arguments (each printed with its flag). `check RUN_DIR` exits 0
when the directory meets the output contract, 1 with every problem printed, 2 when it is not a directory;
`schema` prints the scenario files' JSON Schema. `plan` exits 0, 2 for a bad flag (named) or scenario (or an
--out holding a plan, without --force), 3 when
no layout of the search space fits (it prints the closest and why), 4 for a runtime failure. `sweep` exits 0, 2 for
a bad flag or any bad variant (every one named, nothing runs) or a sweep directory holding another sweep (without
--force), 4 when a variant failed (the others' rows written), 128 + the signal when interrupted (rows kept).
Every command that writes exits 2, with one line naming the path, for an output path the output rule
(`report.output_rule`) refuses, before it starts anything; a closed stdout or stderr stops the printing only.
"""
from __future__ import annotations

import argparse
import errno
import io
import json
import math
import os
import re
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

from .errors import EXIT_BAD_INPUT, EXIT_INFEASIBLE, EXIT_OK, EXIT_RUNTIME, PROBLEMS_SHOWN, OutDirError, Problem, \
    RunInterrupted, ScenarioError, UltraclusterError, shorten, shorten_text

EXIT_CONTRACT = 1   # `check`: the run directory breaks the output contract


class _Parser(argparse.ArgumentParser):
    """argparse, with every long word of an error message (a flag's value echoed back) cut to 200 characters."""

    def error(self, message: str):
        message = re.sub(r"'([^']{201,})'", lambda m: shorten(m.group(1)), message)   # argparse quotes values
        super().error(re.sub(r"\S{201,}", lambda m: shorten_text(m.group()), message))


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="ultracluster", description="Emulate AWS Trainium training clusters on Ray.")
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("validate", help="check a scenario file; print every problem")
    v.add_argument("scenario", help="scenario YAML")
    v.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="override a field")
    r = sub.add_parser("run", help="emulate a scenario and write its run directory")
    r.add_argument("scenario", help="scenario YAML")
    r.add_argument("--out", help="run directory (default runs/<scenario name>)")
    r.add_argument("--address", help="Ray cluster address (default: RAY_ADDRESS, else an embedded local Ray)")
    r.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="override a field")
    r.add_argument("--calibration", dest="calibration_profile", metavar="PROFILE.json",
                    help="a calibration profile from `ultracluster calibrate` instead of the shipped fit")
    r.add_argument("--quiet", action="store_true", help="print nothing but errors")
    r.add_argument("--json", action="store_true", help="print summary.json instead of the table")
    r.add_argument("--hours", type=float, metavar="H",
                   help="then emulate H hours of wall-clock training with failures and checkpoints: goodput, "
                        "time lost by cause, optimal checkpoint interval (goodput.json, failures.csv)")
    r.add_argument("--price-per-hour", metavar="USD|TYPE=USD,...", help="US dollars per instance-hour, over the "
                   "catalog (as cluster.price_per_hour_usd); TYPE=USD pairs: the one of the scenario's type")
    r.add_argument("--force", action="store_true", help="replace an earlier run in the run directory")
    pl = sub.add_parser("plan", help="search every layout of a scenario's model and job; replay the best "
                                     "(plan.csv, plan.json, plan.html, top-N.yaml)")
    pl.add_argument("scenario", help="scenario YAML: the model and job; its cluster is the default reservation")
    pl.add_argument("--instances", metavar="N,N,...", help="instance counts to try (default: the scenario's)")
    pl.add_argument("--instance-types", metavar="TYPE,TYPE,...", help="instance types to try (default: the scenario's)")
    pl.add_argument("--objective", default="tokens_per_s", choices=["tokens_per_s", "usd_per_million_tokens",
                                                                    "time_to_train"],
                    help="what ranks the layouts (default tokens_per_s)")
    pl.add_argument("--rank-by", default="low", metavar="low|point|high",
                    help="which end of each layout's 80 %% interval ranks it: low, the pessimistic end (the slow end "
                         "of the step time; default), point, or high, the optimistic end")
    pl.add_argument("--tokens", type=float, metavar="T", help="tokens to train: time_to_train_days per layout")
    pl.add_argument("--max-usd-per-hour", type=float, metavar="X", help="keep clusters costing at most X $/hour")
    pl.add_argument("--top", type=int, default=5, metavar="K", help="layouts to replay with `run` and write as "
                                                                   "top-N.yaml (default 5, at most 20)")
    pl.add_argument("--max-search-minutes", type=float, default=10.0, metavar="M",
                    help="refuse, before it starts, a search estimated to take longer (default 10)")
    pl.add_argument("--out", help="plan directory (default plans/<scenario name>)")
    pl.add_argument("--address", help="Ray cluster to spread the search over (default: RAY_ADDRESS, else this "
                                      "process, or an embedded Ray where that is faster)")
    pl.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="override a field")
    pl.add_argument("--calibration", dest="calibration_profile", metavar="PROFILE.json",
                    help="a calibration profile from `ultracluster calibrate` instead of the shipped fit")
    pl.add_argument("--quiet", action="store_true", help="print nothing but errors")
    pl.add_argument("--wide", action="store_true", help="print every table in full columns (wider than 100)")
    pl.add_argument("--price-per-hour", metavar="USD|TYPE=USD,...", help="US dollars per instance-hour over the "
                    "catalog: USD for the scenario's type (as cluster.price_per_hour_usd), TYPE=USD for any")
    pl.add_argument("--hbm-headroom", type=float, metavar="FRACTION",
                    help="HBM a layout must leave free (default 0.05: at most 95 %% of a rank's HBM)")
    pl.add_argument("--force", action="store_true", help="replace a plan already in the plan directory")
    pl.add_argument("--keep-runs", action="store_true", help="write each replay's run directory in runs/top-N/ "
                                                             "(report.html, trace.json; can be tens of MB)")
    for flag, meta, what in (("--tp", "N,N,...", "tensor-parallel degrees to try (default: every valid one)"),
                             ("--pp", "N,N,...", "pipeline degrees to try (default: every valid one)"),
                             ("--max-cp", "N", "largest context-parallel degree, powers of two up to it (default 8)"),
                             ("--max-zero", "Z", "highest ZeRO stage to try: 0, 1 or 3 (default 3)"),
                             ("--micro-batches", "N,N,...", "micro_batch values to try (default 1,2,4,8)"),
                             ("--recompute", "MODE,...", "recompute modes: none, selective, full (default all)"),
                             ("--schedules", "S,...", "pipeline schedules: gpipe, 1f1b, interleaved (default all)"),
                             ("--virtual-stages", "V,...", "virtual stages tried with interleaving (default 2,4)"),
                             ("--stack", "S,...", "training stacks searched (names, or a plan's labels nxd, nemo, "
                                                  "megatron), each within what it runs (default: the scenario's stack, "
                                                  "or every Neuron stack that runs on the chips when it names none); "
                                                  "two or more: the best layout of each"),
                             ("--lnc", "N,...", "LNC settings tried on Trn2 and Trn3 (default 1,2)")):
        pl.add_argument(flag, metavar=meta, help=what)
    sw = sub.add_parser("sweep", help="evaluate many variants of a scenario over the Ray cluster: one table, one page "
                                      "(sweep.csv, sweep.parquet with pyarrow, sweep.html)")
    sw.add_argument("scenario", help="scenario YAML (its sweep: section, if any, is the default --vary)")
    sw.add_argument("--vary", action="append", default=[], metavar="KEY=V1,V2,...",
                    help="a scenario key and the values it takes (read as YAML, as --set reads them); repeat for "
                         "more keys: their grid, or with --zip the lists paired")
    sw.add_argument("--zip", action="store_true", default=None, help="pair the --vary lists (one length) instead "
                                                                     "of taking their grid")
    sw.add_argument("--hours", type=float, metavar="H", help="emulate H hours of each variant with failures and "
                    "checkpoints (as run --hours): goodput and the days to train from that run")
    sw.add_argument("--tokens", type=float, metavar="T", help="the training budget in tokens for every variant "
                    "(as training.budget_tokens): days and dollars to train")
    sw.add_argument("--out", help="sweep directory (default sweeps/<scenario name>[-assumptions-off])")
    sw.add_argument("--address", help="Ray cluster to run the variants on (default: RAY_ADDRESS, else this "
                                      "process, or an embedded Ray where that is faster)")
    sw.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="override a field of "
                                                                                         "every variant")
    sw.add_argument("--calibration", dest="calibration_profile", metavar="PROFILE.json",
                    help="a calibration profile from `ultracluster calibrate` instead of the shipped fit")
    sw.add_argument("--price-per-hour", metavar="USD|TYPE=USD,...", help="US dollars per instance-hour over the "
                    "catalog: USD for the scenario's type (as cluster.price_per_hour_usd), TYPE=USD for any")
    sw.add_argument("--assumptions", default="on", metavar="on|off",
                    help="off: evaluate every assumption no source publishes that has an argued range at its "
                         "conservative end (the FSx burst allowance at 0), to see whether it decides the answer")
    sw.add_argument("--max-variants", type=int, metavar="N", help="refuse a sweep of more variants (default "
                                                                  "500)")
    sw.add_argument("--actors", action="store_true", help="replay each variant on Ray actors (a full run) "
                                                          "instead of evaluating it in a task")
    sw.add_argument("--force", action="store_true", help="replace another sweep in the sweep directory")
    sw.add_argument("--quiet", action="store_true", help="print nothing but errors")
    rr = sub.add_parser("report", help="re-render report.html and trace.json of a run directory from its files")
    rr.add_argument("run_dir", metavar="RUN_DIR", help="a directory written by `ultracluster run`")
    rr.add_argument("--quiet", action="store_true", help="print nothing but errors")
    rr.add_argument("--json", action="store_true", help="print summary.json instead of the table")
    c = sub.add_parser("compare", help="summaries of runs side by side, with differences; writes a comparison page")
    c.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="two or more run directories; the first is the "
                                                                     "baseline")
    c.add_argument("--out", metavar="DIR", help="directory for compare.html and compare.csv (default: compare/ "
                   "beside the first run directory); a path ending in .html names the page itself")
    c.add_argument("--force", action="store_true", help="replace an earlier comparison in that directory")
    c.add_argument("--quiet", action="store_true", help="print nothing but errors")
    sv = sub.add_parser("sensitivity", help="how the step time moves as each uncertain factor moves over its range "
                                            "(tornado table; sensitivity.csv and sensitivity.html)")
    sv.add_argument("scenario", help="scenario YAML")
    sv.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="override a field")
    sv.add_argument("--out", help="directory for sensitivity.csv and sensitivity.html (default runs/<name>-sensitivity)")
    sv.add_argument("--calibration", dest="calibration_profile", metavar="PROFILE.json",
                    help="a calibration profile from `ultracluster calibrate` instead of the shipped fit")
    sv.add_argument("--force", action="store_true", help="replace an earlier sensitivity.csv and sensitivity.html "
                                                        "there")
    sv.add_argument("--quiet", action="store_true", help="print nothing but errors")
    cb = sub.add_parser("calibrate", help="fit the model's free factors to your measured runs (a profile for "
                                          "--calibration); or re-verify a profile with --check")
    cb.add_argument("measurements", nargs="?", metavar="MEASUREMENTS",
                    help="CSV or YAML: one row per measured run (scenario, one of step_time_s, seq_per_s, "
                         "tokens_per_s; note, pair)")
    cb.add_argument("--out", metavar="PROFILE.json", help="the profile to write (calibrate.html beside it)")
    cb.add_argument("--check", metavar="PROFILE.json", help="re-verify a profile against its own rows")
    cb.add_argument("--force", action="store_true", help="replace an existing profile (and calibrate.html beside it)")
    cb.add_argument("--quiet", action="store_true", help="print nothing but errors")
    k = sub.add_parser("check", help="check a run directory against the output contract (docs/design.md)")
    k.add_argument("run_dir", metavar="RUN_DIR", help="a directory written by `ultracluster run`")
    sub.add_parser("schema", help="print the JSON Schema of scenario files (for editors; scenario.schema.json)")
    from .network.bench import add_arguments as _collective_flags
    _collective_flags(sub.add_parser("collectives", help="time one collective over sizes on the emulated "
                                                         "NeuronLink/EFA fabric (an nccom-test-like table)"))
    return p


def _render(args) -> int:
    """`report` and `compare`: read run directories back, render, print."""
    from .report import Report, RunDirError, format_compare, format_summary, render_run_dir, write_compare_html

    from .report.output_rule import check_out_file
    from .report.rundir import RunDirLock

    dirs = [args.run_dir] if args.command == "report" else list(args.run_dirs)
    try:
        if args.command == "compare" and len(dirs) < 2:
            raise RunDirError([Problem("RUN_DIR", f"{len(dirs)} run directory", "two or more run directories")])
        if args.command == "report" and Path(dirs[0]).is_dir():
            with RunDirLock(dirs[0]):   # no run may replace the directory while it is read and re-rendered
                report = Report.from_run_dir(dirs[0])
                for rendered in ("report.html", "trace.json"):    # the output rule: re-rendered, never a device
                    check_out_file(Path(dirs[0]) / rendered, True, "RUN_DIR:")
                render_run_dir(report, dirs[0])
            reports = [report]
        else:
            reports = [Report.from_run_dir(d) for d in dirs]
    except RunDirError as err:
        print(f"error: cannot read the run directory: {len(err.problems)} problem(s):", file=sys.stderr)
        _print_list(err.problems)
        return EXIT_BAD_INPUT
    except OutDirError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.command == "report":
        report = reports[0]
        if not args.quiet:
            print(json.dumps(report.summary, indent=2, default=str) if args.json
                  else format_summary({**report.summary, **report.emulation}))
            print(f"re-rendered: {Path(dirs[0]) / 'report.html'}, {Path(dirs[0]) / 'trace.json'}")
        return EXIT_OK if report.summary.get("feasible", True) else EXIT_INFEASIBLE
    names = [Path(d).resolve().name for d in dirs]
    labels = names if len(set(names)) == len(names) else [str(d) for d in dirs]
    try:
        page = _compare_page(args.out, dirs, args.force)
    except OutDirError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    page = write_compare_html(list(zip(labels, reports)), page)
    if not args.quiet:
        print(format_compare([(label, rep.summary) for label, rep in zip(labels, reports)]))
        print(f"comparison page: {page}; every field in full: {page.parent / 'compare.csv'}")
    return EXIT_OK


def _compare_page(out: str | None, dirs: list[str], force: bool) -> Path:
    """Where `compare` writes its page (compare.csv beside it): `--out DIR/compare.html` (a path ending in .html is
    the page), else `compare/` beside the first run directory. The output rule (`report.output_rule`): OutDirError
    for a place that holds an earlier comparison (without --force), files a comparison does not write, a run
    directory (or one inside a run directory being compared), a device or a file."""
    from .report.output_rule import check_out_dir, check_out_file, owns_files

    if out is None:
        first = Path(dirs[0])
        folder = (first.parent if first.name not in ("", ".", "..") else first.resolve().parent) / "compare"
        page = folder / "compare.html"
    elif out.endswith(".html"):
        page = Path(out)
        folder = page.parent
    else:
        folder = Path(out)
        page = folder / "compare.html"
    shown = shorten_text(str(folder))
    if (folder / "summary.json").exists() or any(folder.resolve() == Path(d).resolve() or
                                                 Path(d).resolve() in folder.resolve().parents for d in dirs):
        raise OutDirError(f"--out: {shown} is a run directory or inside one; a comparison goes beside the runs, give "
                          f"--out NEWDIR")
    if out is not None and out.endswith(".html"):      # the page named: two files among whatever is there
        check_out_file(page, force)
        check_out_file(folder / "compare.csv", force)
        return page
    check_out_dir(folder, force, owns_files(COMPARE_FILES), _earlier_comparison, "comparison directory",
                  "a comparison")
    return page


COMPARE_FILES = ("compare.html", "compare.csv")


def _earlier_comparison(folder: Path) -> str | None:
    import time
    found = [folder / f for f in COMPARE_FILES if (folder / f).exists()]
    if not found:
        return None
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(max(p.stat().st_mtime for p in found)))
    return f"a comparison ({', '.join(p.name for p in found)}, written {stamp})"


def _check(run_dir: str) -> int:
    """`check RUN_DIR`: every way the directory breaks the output contract; 0 none, 1 some, 2 no directory."""
    from .report.check import check_run_dir

    try:
        problems = check_run_dir(run_dir)
    except NotADirectoryError:
        given = f"{run_dir} ({'a file' if Path(run_dir).exists() else 'no such directory'})"
        print(f"error: {Problem('RUN_DIR', given, 'a run directory written by `ultracluster run`')}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not problems:
        print(f"ok: {run_dir} meets the output contract")
        return EXIT_OK
    print(f"{run_dir}: {len(problems)} problem(s) with the output contract:")
    for prob in problems:
        print(f"  - {prob}")
    return EXIT_CONTRACT


def _inputs_of(args) -> list[str]:
    """The files a command reads (its scenario, its calibration profile): the output rule never writes over them."""
    return [x for x in (getattr(args, "scenario", None), getattr(args, "calibration_profile", None)) if x]


def _goodput(report, out: Path) -> dict:
    """`run --hours H`: the run's long run (`Report.long_run`, emulated by `runner.run`), with the days and dollars
    summary.json gives at its goodput, as goodput.json, failures.csv, time_lost.csv in `out`
    (`report.write.write_goodput`); returns goodput.json's content."""
    from .report.write import write_goodput

    s = report.summary
    result = report.long_run
    result.extra.update({k: s.get(k) for k in ("time_to_train_days", "total_cost_usd", "compute_cost_usd",
                                               "storage_cost_usd", "price_source") if k in s})
    return write_goodput(result, out)


@contextmanager
def _signals_end_the_run():
    """SIGINT, SIGTERM and SIGHUP raise RunInterrupted (a KeyboardInterrupt) in the main thread, once;
    repeats are ignored while the run cleans up (actors, embedded Ray, the run directory)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum: int, frame) -> None:
        if not fired:
            fired.append(signum)
            raise RunInterrupted(signum)

    wanted = [s for s in (signal.SIGINT, getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s]
    previous = {s: signal.signal(s, handler) for s in wanted}
    try:
        yield
    finally:
        for s, h in previous.items():
            if h is not None:
                signal.signal(s, h)


def _run(scenario, args) -> int:
    """`run`: replay the scenario into its run directory (locked, staged, moved into place when it ends)."""
    from .goodput import format_goodput
    from .runner import run
    from .report import Progress, format_summary
    from .report.rundir import RunDirectory

    if args.hours is not None:       # before anything runs: --hours and the failures it would replay
        from .goodput import check_hours
        problems = check_hours(scenario, args.hours)
        if problems:
            raise ScenarioError(problems, args.scenario)
    out = Path(args.out) if args.out else Path("runs") / scenario.name
    finished: list[int] = []
    # a bar on a terminal (runs over 2 s), plain lines elsewhere, nothing with --quiet
    shown = None if args.quiet else Progress(scenario.name)
    goodput = None
    run_dir = RunDirectory(out, force=args.force, inputs=_inputs_of(args))
    try:
        with _signals_end_the_run(), run_dir:
            if run_dir.stale:
                print(f"note: took over the lock of {out} from pid {run_dir.stale.get('pid', '?')} on host "
                      f"{run_dir.stale.get('host', '?')}, which is no longer running; removed what it left",
                      file=sys.stderr)
            report = run(scenario, out=run_dir, address=args.address, on_step=lambda rec: finished.append(rec.step),
                         progress=shown, hours=args.hours, price_source=getattr(args, "price_from", None))
            if report.long_run is not None:
                goodput = _goodput(report, run_dir.path)
    except KeyboardInterrupt as stop:
        stop = stop if isinstance(stop, RunInterrupted) else RunInterrupted(signal.SIGINT)
        if shown:
            shown.finish()
        kept = (f"{out} keeps the earlier finished run ({run_dir.kept_earlier})" if run_dir.kept_earlier
                else f"{out / 'steps.csv'} keeps them" if finished else f"{out} is left as it was")
        print(f"interrupted after {len(finished)} step(s) ({stop.signal_name}); {kept}", file=sys.stderr)
        return stop.exit_code
    except UltraclusterError as err:
        if run_dir.kept_earlier:
            err.args = (f"{err}; {out} keeps the earlier finished run ({run_dir.kept_earlier})",)
        raise
    finally:
        if shown:
            shown.finish()
    if not args.quiet:
        print(json.dumps(report.summary, indent=2, default=str) if args.json
              else format_summary({**report.summary, **report.emulation}))
        print(f"run directory: {out}")
        if goodput is not None:
            print(json.dumps(goodput, indent=2) if args.json else format_goodput(goodput))
            print(f"goodput: {out / 'goodput.json'}, {out / 'failures.csv'}, {out / 'time_lost.csv'}")
    if not report.summary["feasible"]:
        if args.quiet:
            print(f"infeasible: {report.summary['reason']}", file=sys.stderr)
        return EXIT_INFEASIBLE
    return EXIT_OK


def _plan(scenario, args) -> int:
    """`plan`: search the layouts, replay the best, write the plan directory, print the best layouts."""
    from .plan import format_plan, parse_prices, plan, search_space
    from .plan.output import check_plan_dir
    from .report import WorkProgress

    space = search_space(args.instance_types, args.instances, args.tp, args.pp, args.max_cp, args.max_zero,
                         args.micro_batches, args.recompute, args.schedules, args.virtual_stages, args.stack, args.lnc)
    plain, prices = parse_prices(args.price_per_hour) if args.price_per_hour else (None, None)
    if plain is not None and scenario.cluster.instance in (space.instance_types or (scenario.cluster.instance,)):
        prices = {**(prices or {}), scenario.cluster.instance: plain}   # plan.json says the flag, as run does
    out = Path(args.out) if args.out else Path("plans") / scenario.name
    check_plan_dir(out, args.force, inputs=_inputs_of(args))    # the output rule, before anything is searched
    # a bar on a terminal, plain lines elsewhere (each phase, and every 10 s), nothing with --quiet
    shown = None if args.quiet else WorkProgress(f"plan {scenario.name}")
    say = shown.say if shown else (lambda line: None)
    try:
        with _signals_end_the_run():
            result = plan(scenario, space, objective=args.objective, tokens=args.tokens,
                          max_usd_per_hour=args.max_usd_per_hour, top=args.top, out=out, address=args.address,
                          log=say, max_search_minutes=args.max_search_minutes, progress=shown, prices=prices,
                          force=args.force, keep_runs=args.keep_runs, rank_by=args.rank_by,
                          **({} if args.hbm_headroom is None else {"hbm_headroom": args.hbm_headroom}))
    except KeyboardInterrupt as stop:
        stop = stop if isinstance(stop, RunInterrupted) else RunInterrupted(signal.SIGINT)
        if shown:
            shown.finish()
        print(f"plan interrupted ({stop.signal_name}); {out} is as it was (a plan is moved into place only when "
              f"complete)", file=sys.stderr)
        return stop.exit_code
    finally:
        if shown:
            shown.finish()
    s = result.summary
    if not args.quiet:
        print(format_plan(result, wide=args.wide))
        print(f"plan directory: {out}")
    if not result.top:
        c = s.get("closest")
        why = "no layout fits in HBM" if not s["feasible"] else "no feasible layout is within --max-usd-per-hour"
        print(f"infeasible: {why}" + (f"; closest: {c['label']}: {c['reason']}" if c and not s["feasible"] else ""),
              file=sys.stderr)
        return EXIT_INFEASIBLE
    return EXIT_OK


def _sweep(args) -> int:
    """`sweep`: build and validate every variant, time them (Ray tasks over the attached cluster, or here), write
    the sweep directory, print the table. Exit 0; 2 bad input (nothing runs); 4 a variant failed (the others'
    rows are written); 128 + the signal when interrupted (the finished rows kept)."""
    from .report import WorkProgress
    from .sweep import MAX_VARIANTS, build, check_sweep_dir, format_sweep, run_sweep

    problems = []
    if args.assumptions not in ("on", "off"):
        problems.append(Problem("--assumptions", args.assumptions, "on (default) or off (each assumption no "
                                                                   "source publishes at its conservative end)"))
    if args.max_variants is not None and args.max_variants < 1:
        problems.append(Problem("--max-variants", args.max_variants, "an integer >= 1"))
    if args.tokens is not None and not (math.isfinite(args.tokens) and args.tokens > 0):
        problems.append(Problem("--tokens", args.tokens, "a number of tokens > 0, e.g. 1.5e12"))
    if problems:
        for prob in problems:
            print(f"error: {prob}", file=sys.stderr)
        return EXIT_BAD_INPUT
    sets = list(args.set) + ([f"training.budget_tokens={args.tokens!r}"] if args.tokens is not None else [])
    by_type: dict[str, float] = {}
    try:
        if args.price_per_hour:
            from .plan import parse_prices
            plain, by_type = parse_prices(args.price_per_hour)
            if plain is not None:
                sets.append(f"cluster.price_per_hour_usd={plain!r}")
        if args.calibration_profile:
            sets.append("calibration=" + json.dumps({"profile": str(Path(args.calibration_profile).absolute())}))
        off = args.assumptions == "off"
        plan = build(args.scenario, sets, args.vary, args.zip, args.hours, args.max_variants or MAX_VARIANTS,
                     options={"actors": args.actors}, prices=by_type, conservative=off,
                     log=None if args.quiet else lambda line: print(line, file=sys.stderr))
    except ScenarioError as err:
        if err.problems and all(p.path.startswith("--") and p.path != "--set" for p in err.problems):
            for prob in err.problems:
                print(f"error: {prob}", file=sys.stderr)
        else:
            _print_problems(err)
        return EXIT_BAD_INPUT
    out = Path(args.out) if args.out else Path("sweeps") / (plan.base.name + ("-assumptions-off" if off else ""))
    try:
        check_sweep_dir(out, _inputs_of(args))       # the output rule, before the lock; a rerun's rows are reused
    except OutDirError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    shown = None if args.quiet else WorkProgress(f"sweep {plan.base.name}")
    say = shown.say if shown else (lambda line: None)
    for note in plan.notes:
        say(f"note: {note}")
    try:
        with _signals_end_the_run():
            result = run_sweep(plan, out, address=args.address, actors=args.actors, assumptions_on=not off,
                               force=args.force, progress=shown, log=say)
    except KeyboardInterrupt as stop:
        kept = getattr(stop, "kept_earlier", None)     # a --force sweep over another: that one is kept as it was
        stop = stop if isinstance(stop, RunInterrupted) else RunInterrupted(signal.SIGINT)
        if shown:
            shown.finish()
        print(f"sweep interrupted ({stop.signal_name}); " + (
            f"{out} keeps {kept} as it was, and this sweep's rows were dropped: run it again with --force to "
            f"replace it" if kept else
            f"{out} keeps the finished rows: run the same sweep again to evaluate the rest"), file=sys.stderr)
        return stop.exit_code
    except OutDirError as err:
        if shown:
            shown.finish()
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except UltraclusterError as err:
        if shown:
            shown.finish()
        kept = getattr(err, "kept_earlier", None)
        print(f"error: {err}" + (f" ({out} keeps {kept} as it was)" if kept else ""), file=sys.stderr)
        return EXIT_RUNTIME
    finally:
        if shown:
            shown.finish()
    from .sweep.output import NO_PARQUET, parquet_engine, table_files
    if not args.quiet:
        print(format_sweep(result.table, result.summary, plan.keys))
        print(f"sweep directory: {out} ({', '.join(table_files())}, sweep.html)")     # a path is never wrapped:
        print(f"evaluated by {result.summary['evaluated_by']} in {result.summary['wall_s']:.1f} s")  # within 100
    if not parquet_engine():
        print(f"note: {NO_PARQUET}", file=sys.stderr)
    for line in result.failures:
        print(f"error: {line}", file=sys.stderr)
    return EXIT_RUNTIME if result.failures else EXIT_OK


def _print_list(problems: list) -> None:
    for prob in problems[:PROBLEMS_SHOWN]:
        print(f"  - {prob}", file=sys.stderr)
    if len(problems) > PROBLEMS_SHOWN:
        print(f"  ... and {len(problems) - PROBLEMS_SHOWN} more problem(s)", file=sys.stderr)


def _print_problems(err: ScenarioError) -> None:
    src = f" {shorten_text(err.source)}" if getattr(err, "source", None) else ""
    print(f"error: scenario{src} has {len(err.problems)} problem(s):", file=sys.stderr)
    _print_list(err.problems)


def _sensitivity(scenario, args) -> int:
    """`ultracluster sensitivity`: time the scenario in this process, then each uncertain factor at both ends."""
    from .job import Job, evaluate
    from .report.write import SENSITIVITY_FILES, write_sensitivity
    from .report.output_rule import check_out_dir, owns_files
    from .report.sensitivity import SENSITIVITY_COLUMNS, sensitivity_rows, tornado_text
    from .layouts.setting_times import setting_step_times
    from .uncertainty import interval

    out = Path(args.out or Path("runs") / f"{scenario.name}-sensitivity")
    check_out_dir(out, args.force, owns_files(SENSITIVITY_FILES),
                  lambda d: ", ".join(f for f in SENSITIVITY_FILES if (d / f).exists()) or None,
                  "sensitivity directory", "sensitivity", inputs=_inputs_of(args))
    s = evaluate([Job.of(scenario)])[0]
    if not s["feasible"]:
        print(f"infeasible: {s['reason']}", file=sys.stderr)
        return EXIT_INFEASIBLE
    iv = interval(scenario, s["step_time_s"], times=setting_step_times)
    rows = sensitivity_rows(iv)
    write_sensitivity(out, scenario.name, iv.point_s, iv.low_s, iv.high_s, rows, SENSITIVITY_COLUMNS)
    if not args.quiet:
        print(tornado_text(iv, rows))
        print(f"wrote {out / 'sensitivity.csv'}, {out / 'sensitivity.html'}")
    return EXIT_OK


def _calibrate(args) -> int:
    """`calibrate MEASUREMENTS --out PROFILE.json`: fit and write; `calibrate --check PROFILE.json`: re-verify
    (0 ok, 1 it does not re-verify, 2 unreadable, damaged or edited)."""
    from .calibrate.command import calibrate
    from .calibrate.output import check_profile, format_text, write_profile
    from .calibration.profile import ProfileError

    usage = [Problem(flag, given, allowed) for bad, flag, given, allowed in (
        (args.check and (args.measurements or args.out), "--check", args.check,
         "alone: `calibrate --check PROFILE.json` (without MEASUREMENTS or --out)"),
        (not args.check and not args.measurements, "MEASUREMENTS", "<missing>",
         "a CSV or YAML file of measured runs, or --check PROFILE.json"),
        (not args.check and args.measurements and not args.out, "--out", "<missing>",
         "the profile to write, e.g. --out my-cluster.json")) if bad]
    for prob in usage:
        print(f"error: {prob}", file=sys.stderr)
    if usage:
        return EXIT_BAD_INPUT
    try:
        if args.check:
            _, problems = check_profile(args.check)
            if problems:
                print(f"{args.check}: {len(problems)} problem(s):", file=sys.stderr)
                _print_list(problems)
                return EXIT_CONTRACT
            print(f"ok: {args.check} re-verifies: its rows re-predict with its factors, which are their fit")
            return EXIT_OK
        _check_profile_out(args.out, args.force, [args.measurements])   # the output rule, before the fit
        say = (lambda line: None) if args.quiet else (lambda line: print(line, file=sys.stderr))
        with _signals_end_the_run():
            done = calibrate(args.measurements, log=say)
        base = Path(args.measurements).parent          # the rows' scenario files are inputs too
        _check_profile_out(args.out, args.force, [args.measurements] + [
            str(base / r["scenario"]) for r in done.profile.get("rows", []) if isinstance(r.get("scenario"), str)])
        profile, page = write_profile(done.profile, args.out)
    except ScenarioError as err:
        src = f" {shorten_text(err.source)}" if getattr(err, "source", None) else ""
        print(f"error: measurements{src} have {len(err.problems)} problem(s); nothing written:", file=sys.stderr)
        _print_list(err.problems)
        return EXIT_BAD_INPUT
    except (ProfileError, OutDirError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as stop:
        stop = stop if isinstance(stop, RunInterrupted) else RunInterrupted(signal.SIGINT)
        print(f"calibrate interrupted ({stop.signal_name}); nothing written", file=sys.stderr)
        return stop.exit_code
    except UltraclusterError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_RUNTIME
    if not args.quiet:
        print(format_text(done.profile, done.wall_s, done.settings_timed))
        print(f"wrote {profile}, {page}")
    return EXIT_OK


class _ClosedStreamSafe:
    """A text stream whose reader may go away (`ultracluster run ... | head -3`): the first write or flush that
    finds the pipe closed (EPIPE) or the descriptor closed (EBADF) points the descriptor at /dev/null and every
    later write is dropped, so a closed stdout or stderr stops the printing and never the command."""

    def __init__(self, stream) -> None:
        self._stream, self._gone = stream, stream is None     # None: Python found the descriptor closed (`>&-`)

    def _closed(self) -> None:
        self._gone = True
        try:
            import os
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._stream.fileno())   # what the interpreter flushes at exit goes nowhere, quietly
            os.close(null)
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            pass

    def _guarded(self, call, *args):
        """`call(*args)` on the stream unless it is gone; a closed pipe or descriptor makes it gone (None)."""
        if self._gone:
            return None
        try:
            return call(*args)
        except OSError as err:         # BrokenPipeError is EPIPE
            if err.errno not in (errno.EPIPE, errno.EBADF):
                raise
            self._closed()
            return None

    def write(self, text: str) -> int:
        written = self._guarded(lambda t: self._stream.write(t), text)
        return len(text) if written is None else written

    def flush(self) -> None:
        self._guarded(lambda: self._stream.flush())

    def isatty(self) -> bool:
        return not self._gone and self._stream.isatty()

    def fileno(self) -> int:
        if self._stream is None:
            raise io.UnsupportedOperation("fileno")
        return self._stream.fileno()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@contextmanager
def _streams_that_may_close():
    """sys.stdout and sys.stderr as `_ClosedStreamSafe` for the command's duration (restored after)."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _ClosedStreamSafe(sys.stdout), _ClosedStreamSafe(sys.stderr)
    try:
        yield
    finally:
        for guarded in (sys.stdout, sys.stderr):
            if isinstance(guarded, _ClosedStreamSafe):
                guarded.flush()
        sys.stdout, sys.stderr = saved


def _check_profile_out(out: str, force: bool, inputs: list[str]) -> None:
    """The output rule for `calibrate --out PROFILE.json` and the calibrate.html written beside it."""
    from .calibrate.output import html_path
    from .report.output_rule import check_out_file

    check_out_file(out, force, "--out", inputs)
    page = html_path(out)
    if page.name == Path(out).name:
        raise OutDirError(f"--out {shorten_text(out)}: that is the name of the page written beside the profile; "
                          f"give the profile another name, e.g. --out profile.json")
    check_out_file(page, force, "--out (calibrate.html, beside the profile)", inputs)


def main(argv: list[str] | None = None) -> int:
    with _streams_that_may_close():
        try:
            return _main(argv)
        except OSError as err:            # a write the output rule could not foresee (a full disk, /proc): one line
            where = f"{shorten_text(str(err.filename))}: " if err.filename else ""
            print(f"error: cannot write {where}{err.strerror or err}", file=sys.stderr)
            return EXIT_BAD_INPUT if err.filename else EXIT_RUNTIME


def _main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    for flag in ("out", "csv", "check"):             # an empty path is no path: never a silent default
        if getattr(args, flag, None) == "":
            print(f"error: {Problem('--' + flag, '', 'a path')}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if args.command in ("report", "compare"):
        return _render(args)
    if args.command == "check":
        return _check(args.run_dir)
    if args.command in ("run", "plan", "sweep"):
        # before any file is written (the run directory's lock, its staging directory): with RAY_AUTH_MODE=token
        # and no token Ray's C++ token loader ends the process without a word (docs/ray-clusters.md)
        from .actors.auth import token_missing
        why = token_missing(getattr(args, "address", None) or os.environ.get("RAY_ADDRESS"))
        if why is not None:
            print(f"error: {why}", file=sys.stderr)
            return EXIT_RUNTIME
    if args.command == "calibrate":
        return _calibrate(args)
    if args.command == "schema":
        from .scenario.file_schema import render
        sys.stdout.write(render())
        return EXIT_OK
    if args.command == "sweep":
        return _sweep(args)
    if args.command == "collectives":
        from .network.bench import run_cli
        from .report.atomic import atomic_write_text
        from .report.output_rule import check_out_file
        try:
            if args.csv:                               # the output rule, before anything is timed
                check_out_file(args.csv, args.force, "--csv")
            code, text = run_cli(args)
            if text is not None:
                atomic_write_text(args.csv, text)      # a new file renamed over the path: never through a link
            return code
        except OutDirError as err:
            print(f"error: {err}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except ScenarioError as err:
            for prob in err.problems:
                print(f"error: {prob}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except UltraclusterError as err:      # a fitted calibration file missing or damaged
            print(f"error: {err}", file=sys.stderr)
            return EXIT_RUNTIME
    from .scenario import load_scenario  # after parsing, so --help stays fast
    from .step.price import FLAG_PRICE
    by_type: dict[str, float] = {}
    if getattr(args, "price_per_hour", None):        # `run`, `plan`: USD is cluster.price_per_hour_usd
        from .plan import parse_prices
        try:
            plain, by_type = parse_prices(args.price_per_hour)
        except ScenarioError as err:
            print(f"error: {err.problems[0]}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if plain is not None:
            args.set.append(f"cluster.price_per_hour_usd={plain!r}")    # after the user's --set: the flag wins
            args.price_from = FLAG_PRICE
    if getattr(args, "calibration_profile", None):    # the flag is the scenario key, relative to here
        args.set = [*args.set, "calibration=" + json.dumps({"profile": str(Path(args.calibration_profile).absolute())})]
    try:
        scenario = load_scenario(args.scenario, args.set)
        if args.command == "run" and scenario.cluster.instance in by_type and \
                not any(x.startswith("cluster.price_per_hour_usd=") for x in args.set):
            scenario = load_scenario(args.scenario, args.set + [
                f"cluster.price_per_hour_usd={by_type[scenario.cluster.instance]!r}"])
            args.price_from = FLAG_PRICE
        if args.command == "validate":
            print(f"ok: {args.scenario} ({scenario.name}: {scenario.ranks} ranks, tp {scenario.parallelism.tp} "
                  f"pp {scenario.parallelism.pp} dp {scenario.parallelism.dp})")
            from .stacks import end_of_support_notes
            for line in end_of_support_notes([scenario.stack]):
                print(f"note: {line}")
            from . import stacks
            fill = stacks.filled(scenario)
            if fill:   # what the stack chose for this layout (some defaults depend on pp, the MLP kind, seq_len)
                print(f"stack {scenario.stack} filled: " + ", ".join(
                    f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in fill.items()))
            return EXIT_OK
        if args.command == "plan":
            return _plan(scenario, args)
        if args.command == "sensitivity":
            return _sensitivity(scenario, args)
        return _run(scenario, args)
    except ScenarioError as err:
        if args.command == "plan" and err.problems and all(p.path.startswith("--") and p.path != "--set"
                                                           for p in err.problems):   # bad flags of `plan`
            for prob in err.problems:
                print(f"error: {prob}", file=sys.stderr)
            return EXIT_BAD_INPUT
        _print_problems(err)
        return EXIT_BAD_INPUT
    except OutDirError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except UltraclusterError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_RUNTIME


if __name__ == "__main__":
    sys.exit(main())
