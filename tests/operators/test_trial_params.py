"""``TrainingGroupOperator(trial_params=...)``: one mapped task per trial, each with its params and checkpoints."""

from __future__ import annotations

import json

import pytest

from airflow_elastic import Checkpointing, Role
from airflow_elastic.operators import TrainingGroupOperator
from airflow_elastic.operators import identity as ident
from airflow_elastic.training.render.trial import params_digest
from airflow_elastic.training.spec import SpecError
from tests.support.builders import group
from tests.support.operator_fakes import FakeHook, StateStore, TaskInstance


def prepared(op: TrainingGroupOperator, map_index: int = -1) -> dict:
    """The manifest of the op's first attempt, after Airflow's template rendering."""
    op.hook = lambda: FakeHook()  # type: ignore[method-assign]
    ti = TaskInstance(dag_id="sweepy", task_id=op.task_id, map_index=map_index)
    context = {"ti": ti, "task_state_store": StateStore(), "params": {}, "run_id": ti.run_id, "ds": "2025-01-01"}
    op.render_template_fields(context)  # type: ignore[arg-type]
    return op._manifest("train-abcdef", "default", ident.TaskIdentity.from_ti(ti))


def trainer_env(manifest: dict) -> tuple[dict[str, str], dict]:
    container = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}, container


def test_mapped_trial_gets_its_params_templated_strings_and_checkpoint_dir():
    spec = group(
        roles=[Role("leader", args=["--lr={{ trial.params.lr }}", "--day={{ ds }}"])],
        checkpoint=Checkpointing("/tmp/ckpt"),
    )
    op = TrainingGroupOperator(task_id="trial", group=spec, trial_params={"lr": 0.01, "tag": "{{ ds }}"})
    env, container = trainer_env(prepared(op, map_index=2))
    assert json.loads(env["AE_TRIAL_PARAMS"]) == {"lr": 0.01, "tag": "2025-01-01"}  # trial_params is templated
    assert container["args"] == ["--lr=0.01", "--day=2025-01-01"]
    # Under the sweep (here the task id) and a digest of the parameters: no other trial's checkpoints.
    assert env["AE_CHECKPOINT_URI"] == f"/tmp/ckpt/trial/trial-3-{params_digest({'lr': 0.01, 'tag': '2025-01-01'})}"


def test_without_trial_params_nothing_changes():
    env, _ = trainer_env(prepared(TrainingGroupOperator(task_id="t", group=group(checkpoint=Checkpointing("/c")))))
    assert "AE_TRIAL_PARAMS" not in env and env["AE_CHECKPOINT_URI"] == "/c"


def test_trial_params_need_a_group_and_a_dict():
    manifest = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "x"}, "spec": {}}
    with pytest.raises(SpecError, match="trial_params: needs group="):
        TrainingGroupOperator(task_id="t", jobset=manifest, trial_params={"a": 1})
    with pytest.raises(SpecError, match="trial_params: must be a dict"):
        prepared(TrainingGroupOperator(task_id="t", group=group(), trial_params=[1, 2]))
