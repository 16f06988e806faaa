"""`ultracluster collectives`: the table, the CSV contract, and bad arguments (exit 2 naming the flag)."""
import csv

import pytest

from ultracluster.cli import main
from ultracluster.errors import ScenarioError
from ultracluster.network.bench import CSV_COLUMNS, parse_sizes


def test_issue_example_prints_a_table_and_writes_the_csv(tmp_path, capsys):
    out = tmp_path / "c.csv"
    rc = main(["collectives", "--instance", "trn2.48xlarge", "--instances", "2", "--ranks", "128", "--op",
               "all_reduce", "--dtype", "bf16", "--sizes", "8,1K,1M,64M,1G", "--csv", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "GB/s = 1e9 bytes/s" in text and "busbw(GB/s)" in text and "hierarchical(" in text
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0].keys()) == CSV_COLUMNS == ("op", "ranks", "instances", "bytes", "time_us", "algbw_gb_s",
                                                     "busbw_gb_s", "algorithm")
    assert [int(r["bytes"]) for r in rows] == [8, 1024, 1 << 20, 64 << 20, 1 << 30]
    assert all(r["op"] == "all_reduce" and r["ranks"] == "128" and r["instances"] == "2" for r in rows)
    times = [float(r["time_us"]) for r in rows]
    assert times == sorted(times)
    r = rows[-1]
    algbw = int(r["bytes"]) / (float(r["time_us"]) * 1e-6) / 1e9
    assert float(r["algbw_gb_s"]) == pytest.approx(algbw, rel=1e-5)
    assert float(r["busbw_gb_s"]) == pytest.approx(algbw * 2 * 127 / 128, rel=1e-5)


def test_what_if_flags_change_the_answer(tmp_path):
    base, fast = tmp_path / "a.csv", tmp_path / "b.csv"
    args = ["collectives", "--instance", "trn2.48xlarge", "--instances", "2", "--op", "allr", "--sizes", "1G"]
    assert main(args + ["--csv", str(base)]) == 0
    assert main(args + ["--efa-gbps", "6400", "--csv", str(fast)]) == 0
    t = [float(next(csv.DictReader(open(p)))["time_us"]) for p in (base, fast)]
    assert t[1] < t[0]
    assert main(args + ["--lnc", "1", "--ranks", "256", "--csv", str(fast)]) == 2      # never over a file silently
    assert main(args + ["--lnc", "1", "--ranks", "256", "--csv", str(fast), "--force"]) == 0


def test_sizes_take_power_of_two_suffixes():
    assert parse_sizes("8,1K,1M,64M,1G") == [8, 1024, 1 << 20, 64 << 20, 1 << 30]
    assert parse_sizes("2KiB, 3MB") == [2048, 3 << 20]
    for bad in ("", "0", "1.5K", "-8", "4T", "ten"):
        with pytest.raises(ScenarioError, match="--sizes"):
            parse_sizes(bad)


@pytest.mark.parametrize("args, flag", [
    (["--sizes", "1X"], "--sizes"),
    (["--sizes", "3"], "--sizes"),                          # not a whole number of bf16 elements
    (["--instance", "p5.48xlarge"], "--instance"),
    (["--instances", "0"], "--instances"),
    (["--ranks", "7", "--instances", "2"], "--ranks"),
    (["--op", "broadcast"], "--op"),
    (["--dtype", "int4"], "--dtype"),
    (["--instance", "trn1.32xlarge", "--lnc", "2"], "--lnc"),
    (["--efa-gbps", "-1"], "--efa-gbps"),
    (["--op", "send_recv", "--ranks", "4"], "--ranks"),
])
def test_bad_arguments_exit_2_naming_the_flag(args, flag, capsys):
    assert main(["collectives"] + args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: " + flag) and "allowed" in err


def test_unparsable_numbers_are_argparse_errors(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["collectives", "--instances", "two"])
    assert exc.value.code == 2 and "--instances" in capsys.readouterr().err
