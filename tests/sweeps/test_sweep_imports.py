"""DAG files import ``airflow_elastic.sweeps`` at every parse: building a space must stay cheap."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("optuna", "numpy", "matplotlib", "airflow", "kubernetes", "sqlalchemy")

SCRIPT = """
import sys
from airflow_elastic.sweeps import choice, loguniform, randint, uniform
from airflow_elastic.sweeps import space, history, stopping, mapping, sampler, report
from airflow_elastic.contract import markers
from airflow_elastic.training.render.trial import trial_group, trial_labels
space = {"lr": loguniform(1e-4, 1e-1), "hidden": choice([32, 64]), "dropout": uniform(0, 0.5), "layers": randint(1, 4)}
from airflow_elastic.sweeps import sweep_params, select_best
sweep_params({"hidden": choice([32, 64])})
sweep_params(space, algorithm="random", n=4, seed=1)
import airflow_elastic.runtime
heavy = sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)
print(",".join(heavy))
"""


def test_building_a_space_imports_no_heavy_package():
    code = f"HEAVY = {HEAVY!r}\n{SCRIPT}"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"loaded: {out.stdout.strip()}"


def test_runtime_still_imports_with_the_standard_library_only():
    """``runtime.report_intermediate`` uses the marker module: it must not pull anything outside the stdlib."""
    from tests.support.paths import ROOT

    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); from airflow_elastic import runtime; "
        "runtime.report_intermediate(1, {'a': 1.0})"
    )
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("AE_INTERMEDIATE")


def test_lazy_names_and_unknown_ones():
    import airflow_elastic.sweeps as sweeps
    from airflow_elastic.sweeps.mapping import select_best

    assert sweeps.select_best is select_best
    with pytest.raises(AttributeError, match="has no attribute 'tune'"):
        sweeps.tune  # noqa: B018
