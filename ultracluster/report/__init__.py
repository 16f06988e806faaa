"""Replay events (RunResult) → pandas Report → run-directory files (CSV/Parquet, JSON, trace, HTML)."""
from ultracluster.report.frames import Report, build_report
from ultracluster.report.readback import RunDirError
from ultracluster.report.progress import Progress, WorkProgress
from ultracluster.report.compare import format_compare
from ultracluster.report.table import format_summary
from ultracluster.report.write import StepWriter, render_run_dir, write_compare_html, write_run_dir

__all__ = ["Report", "RunDirError", "build_report", "write_run_dir", "render_run_dir", "write_compare_html",
           "StepWriter", "format_summary", "format_compare", "Progress", "WorkProgress"]
