"""Deterministic Nelder-Mead minimisation shared by the fitting scripts: it lives in the package
(`ultracluster.calibrate.nelder_mead`, which `ultracluster calibrate` uses too); re-exported for fit_collectives.py."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ultracluster.calibrate.nelder_mead import minimize  # noqa: E402,F401
