"""OpenLineage from the training and stage operators (docs/concepts/lineage.md): the nightly pipeline's operators,
rendered as a run renders them, report the split, the checkpoints and the model version as the OpenLineage
provider's datasets; without the provider they report nothing and need nothing."""

from __future__ import annotations

import collections
import copy
import importlib.util
import sys
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from airflow_elastic import BatchStage
from airflow_elastic.operators import BatchStageOperator, TrainingGroupOperator
from airflow_elastic.training.spec import SpecError
from tests.support.operator_fakes import StateStore, TaskInstance
from tests.support.paths import ROOT

RUN_ID = "manual__2026-12-01T02:00:00+00:00"
VERSION = "manual__2026-12-01T02-00-00-00-00"
STAGE = BatchStage("score", image="python:3.12", command=["python", "-c", "pass"])


@pytest.fixture(scope="module")
def nightly() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nightly_training", ROOT / "dags" / "nightly_training.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rendered(op: Any, root: str, pulled: dict[str, Any] | None = None) -> Any:
    """``op`` with its templates rendered for run ``RUN_ID`` with the ``root`` param, as the task runner renders
    them before the OpenLineage listener asks (on a copy: rendering replaces the templates)."""
    op = copy.deepcopy(op)

    class NoCluster:
        def get_namespace(self) -> str:
            return "default"

    op.hook = NoCluster  # the training operator's view of its manifest resolves a namespace
    ti = TaskInstance(
        dag_id=op.dag_id, task_id=op.task_id, run_id=RUN_ID, pulled=pulled or {"*": collections.defaultdict(str)}
    )
    params = {**{k: op.params[k] for k in op.params}, "root": root}
    context = {"ti": ti, "task_state_store": StateStore(), "params": params, "run_id": RUN_ID}
    context["var"] = {"value": {}, "json": {}}
    op.render_template_fields(context)
    return op


def names(datasets: list[Any]) -> list[tuple[str, str]]:
    return [(d.namespace, d.name) for d in datasets]


@pytest.mark.parametrize(
    ("root", "namespace", "prefix"),
    [("/srv/night", "file", "/srv/night/"), ("gs://ml-bucket/night", "gs://ml-bucket", "night/")],
)
def test_the_nightly_pipeline_reports_split_to_checkpoints_to_model_version(nightly, root, namespace, prefix):
    from openlineage.client.event_v2 import Dataset

    data = (namespace, f"{prefix}data/digits/{VERSION}")
    checkpoints = (namespace, f"{prefix}checkpoints/digits/{VERSION}/final")
    model = (namespace, f"{prefix}models/digits/{VERSION}/model")
    train_result = {"checkpoint": f"{root}/checkpoints/digits/{VERSION}/final"}
    prepare = rendered(nightly.dag.get_task("prepare"), root)
    train = rendered(nightly.dag.get_task("train"), root, {"*": collections.defaultdict(str)})
    evaluate = rendered(nightly.dag.get_task("evaluate"), root, {"train": train_result})

    reported = {}
    for op in (prepare, train, evaluate):
        start = op.get_openlineage_facets_on_start()
        assert op.get_openlineage_facets_on_complete(SimpleNamespace()) == start
        assert all(type(d) is Dataset for d in [*start.inputs, *start.outputs])  # openlineage.client's own
        reported[op.task_id] = (names(start.inputs), names(start.outputs))
    assert reported == {
        "prepare": ([], [data]),  # the uri of its data asset's event
        "train": ([data], [checkpoints]),  # the rendered group's checkpoint directory
        "evaluate": ([data, checkpoints], [model]),  # the version's served model
    }
    failed = train.get_openlineage_facets_on_failure(SimpleNamespace())
    assert (names(failed.inputs), failed.outputs) == ([data], [])  # a failed try wrote nothing to rely on


def test_the_openlineage_listener_takes_the_operators_datasets(nightly):
    """The provider's own extractor manager (what its listener calls) finds the methods and uses their answer."""
    from airflow.providers.openlineage.extractors.manager import ExtractorManager
    from airflow.utils.state import TaskInstanceState

    train = rendered(nightly.dag.get_task("train"), "/srv/night")
    dagrun = SimpleNamespace(run_id=RUN_ID)
    manager = ExtractorManager()
    for state, outputs in (
        (TaskInstanceState.RUNNING, 1),
        (TaskInstanceState.SUCCESS, 1),
        (TaskInstanceState.FAILED, 0),
    ):
        lineage = manager.extract_metadata(dagrun, train, state, SimpleNamespace(task=train))
        assert names(lineage.inputs) == [("file", f"/srv/night/data/digits/{VERSION}")], state
        assert len(lineage.outputs) == outputs, state


def test_without_the_provider_the_operators_report_nothing_and_fail_nothing(nightly, monkeypatch):
    for module in ("airflow.providers.openlineage.extractors", "openlineage.client.event_v2"):
        monkeypatch.setitem(sys.modules, module, None)  # `import` raises ImportError, as when it is not installed
    train = rendered(nightly.dag.get_task("train"), "/srv/night")
    assert train.get_openlineage_facets_on_start() is None
    assert train.get_openlineage_facets_on_complete(SimpleNamespace()) is None
    assert train.get_openlineage_facets_on_failure(SimpleNamespace()) is None


def test_a_bad_location_fails_the_parse_and_the_arguments_are_templated():
    with pytest.raises(SpecError, match=r"lineage_inputs\[1\].*absolute"):
        BatchStageOperator(task_id="s", stage=STAGE, lineage_inputs=["/d", "data/raw"])
    with pytest.raises(SpecError, match=r"lineage_outputs: must be a list"):
        TrainingGroupOperator(task_id="t", group=nightly_free_group(), lineage_outputs="gs://b/x")
    op = TrainingGroupOperator(task_id="t", group=nightly_free_group(), lineage_inputs=["{{ params.root }}/d"])
    assert {"lineage_inputs", "lineage_outputs"} <= set(op.template_fields)
    assert {"lineage_inputs", "lineage_outputs"} <= set(BatchStageOperator.template_fields)


def test_an_operator_that_declares_nothing_reports_no_datasets_so_its_inlets_and_outlets_count():
    """No datasets of its own: the provider then falls back on the task's inlets and outlets."""
    op = BatchStageOperator(task_id="s", stage=STAGE)
    lineage = op.get_openlineage_facets_on_start()
    assert (lineage.inputs, lineage.outputs) == ([], [])


def nightly_free_group() -> Any:
    from tests.support.builders import group

    return group()
