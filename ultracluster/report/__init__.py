"""Replay events (RunResult) → pandas Report → run-directory files (CSV/Parquet, JSON, trace, HTML)."""
from ultracluster.report.frames import Report, build_report
from ultracluster.report.table import format_summary
from ultracluster.report.write import StepWriter, write_run_dir

__all__ = ["Report", "build_report", "write_run_dir", "StepWriter", "format_summary"]
