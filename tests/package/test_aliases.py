"""The module paths of releases before the domain packages still import, as the very modules that moved."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from airflow_elastic import _aliases

A = "airflow_elastic"


@pytest.mark.parametrize("old", sorted(_aliases.MOVED))
def test_old_path_is_the_moved_module(old: str):
    module, new = importlib.import_module(f"{A}.{old}"), importlib.import_module(f"{A}.{_aliases.MOVED[old]}")
    extra = _aliases.EXTRA_NAMES.get(old)
    if extra is None:
        assert module is new
        assert new.__spec__.name == new.__name__  # its own spec, not the alias's (importlib.resources reads it)
        return
    # A package that also re-exported names now in another domain: a view of both.
    for name in getattr(new, "__all__", ()):
        assert getattr(module, name) is getattr(new, name)
    for name, home in extra.items():
        assert getattr(module, name) is getattr(importlib.import_module(f"{A}.{home}"), name)


def test_documented_imports_of_earlier_releases():
    """What earlier READMEs showed, spelled as they showed it (a fresh interpreter: no module imported yet)."""
    script = "\n".join(
        [
            "from airflow_elastic.spec import TrainingGroup, Role",
            "from airflow_elastic.stage import BatchStage",
            "from airflow_elastic.render import render_jobset, render_job, render_trainjob, schema_errors",
            "from airflow_elastic.render.trial import trial_group",
            "from airflow_elastic.state import GroupEvent",
            "from airflow_elastic.classify import classify",
            "from airflow_elastic.backends import check_backend",
            "from airflow_elastic.rollout import judge",
            "from airflow_elastic.platforms import SPOT_PLATFORMS",
            "from airflow_elastic.names import run_name",
            "from airflow_elastic.schemas import INFERENCESERVICES",
            "from airflow_elastic import checkpoints, names, platforms, schemas",
            "from airflow_elastic.sweeps.markers import format_line, parse",
            "from airflow_elastic.sweeps.operator import HyperparameterSweepOperator",
            "from airflow_elastic.operators.training_group import TrainingGroupOperator",
            "from airflow_elastic.operators.batch_stage import BatchStageOperator",
            "from airflow_elastic.operators.inference_service import InferenceServiceOperator",
            "from airflow_elastic.links import SweepReportLink",
            "import airflow_elastic.render.jobset, airflow_elastic.training.render.jobset as new",
            "assert airflow_elastic.render.jobset is new",
            "from airflow_elastic.stages.job import render_job as moved",
            "assert render_job is moved",
        ]
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize(
    "classpath",
    [
        # Airflow stores these in the trigger table for every deferred task: they must import after an upgrade.
        "airflow_elastic.triggers.training_group.TrainingGroupTrigger",
        "airflow_elastic.triggers.batch_stage.BatchStageTrigger",
        "airflow_elastic.triggers.inference_service.InferenceServiceTrigger",
        "airflow_elastic.triggers.sweep.SweepTrigger",
    ],
)
def test_trigger_class_paths_are_stable(classpath: str):
    module, _, name = classpath.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    assert f"{cls.__module__}.{cls.__qualname__}" == classpath
