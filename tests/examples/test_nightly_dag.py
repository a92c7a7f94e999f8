"""The flagship DAG's shape (``dags/nightly_training.py``): its schedule, the data flow between its tasks, and where
each step runs. ``tests/examples/test_demo.py`` runs it end to end."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.support.paths import ROOT, load_dag_file


@pytest.fixture(scope="module")
def nightly() -> ModuleType:
    return load_dag_file("nightly_training", "nightly_training_shape")


def test_it_runs_nightly_at_two_in_a_named_timezone_one_run_at_a_time(nightly):
    dag = nightly.dag
    assert dag.timetable.expression == "0 2 * * *" and str(dag.timetable.timezone) == "Europe/Amsterdam"
    assert dag.catchup is False and dag.max_active_runs == 1


def test_each_step_feeds_the_next(nightly):
    tasks = nightly.dag.task_dict
    downstream = {task_id: sorted(task.downstream_task_ids) for task_id, task in tasks.items()}
    assert downstream == {
        "previous_sweep": ["sweep"],
        "prepare": ["sweep"],
        "sweep": ["publish", "train"],
        "train": ["evaluate", "publish"],
        "evaluate": ["publish"],
        "publish": ["adopt", "promoted", "under_review"],
        "under_review": ["approve"],  # only a candidate in the grey zone asks a person
        "approve": ["adopt"],
        "adopt": ["promoted"],
        "promoted": ["serve"],
        "serve": [],
    }
    # The final training takes the sweep's best parameters; the evaluation the training's checkpoints.
    assert "xcom_pull(task_ids='sweep')['best_params']" in tasks["train"].group.env["TRAIN_PARAMS"]
    assert "xcom_pull(task_ids='train')['checkpoint']" in tasks["evaluate"].stage.env["MODEL_URI"]
    # The evaluation exports the TorchScript into the version's model/, which serve rolls out with its test rows.
    assert tasks["evaluate"].stage.env["EXPORT_URI"].endswith("/models/digits/{{ run_id | version }}/model/model.pt")
    serve = tasks["serve"]
    assert "xcom_pull(task_ids='publish')['locations']['model']" in serve.storage_uri
    assert "xcom_pull(task_ids='evaluate')['metrics']['smoke_request']" in serve.smoke_request
    assert (serve.predictor.model_format, serve.predictor.mode, serve.rollback_on_failure) == (
        "pytorch",
        "Standard",
        True,
    )


def test_stages_run_on_the_cpu_pool_trials_on_spot_and_the_final_replica_groups_on_spot(nightly):
    tasks = nightly.dag.task_dict
    for stage_task in ("prepare", "evaluate"):
        placement = tasks[stage_task].stage.placement
        assert placement.node_selector == {"airflow-elastic.io/capacity-type": "on-demand"}, stage_task
        assert placement.priority_class == "batch-low" and not placement.spot
    assert tasks["prepare"].concurrency_policy == "forbid"
    trial = tasks["sweep"].group
    assert trial.placement.spot and all(role.placement is None for role in trial.roles)
    # The final training: fault-tolerant replica groups of one pod, each on a spot node of its own, the lighthouse
    # on on-demand capacity, a durable checkpoint for the case every replica group is lost.
    final = tasks["train"].group
    (trainer,) = final.roles
    ft = final.fault_tolerance
    assert ft is not None and ft.replica_groups == 2 and ft.min_replica_groups == 1 and final.elastic is None
    assert trainer.replicas == 1 and trainer.placement.spot and trainer.placement.exclusive_topology
    assert not ft.lighthouse_placement.spot and final.checkpoint is not None
    assert trainer.command[0] == "torchrun" and trainer.command[-1].endswith("/train_digits_ft.py")


def test_the_ui_links_the_sweep_report_and_plot_the_run_report_and_the_served_endpoint(nightly):
    from airflow.serialization.serialized_objects import DagSerialization

    served = DagSerialization.from_dict(DagSerialization.to_dict(nightly.dag))  # as the API server reads it
    links = {t: sorted(link.name for link in served.get_task(t).operator_extra_links) for t in served.task_dict}
    assert {t: names for t, names in links.items() if names} == {
        "sweep": ["Sweep plot", "Sweep report"],
        "publish": ["Run report"],
        "serve": ["Served endpoint"],
    }


def test_every_task_retries_after_a_short_delay(nightly):
    """Retries are safe because a retry adopts what its previous try started or finished; the night survives one
    lost worker or failed try."""
    for task_id, task in nightly.dag.task_dict.items():
        assert task.retries >= 1, task_id
        assert 0 < task.retry_delay.total_seconds() <= 120, (task_id, task.retry_delay)


def render(nightly: ModuleType, template: str, params: dict, variables: dict[str, str]) -> str:
    """``template`` as a run renders it, with ``params`` and the Airflow Variables ``variables``."""

    class Accessor:  # what `var.value` offers a template: get(key, default)
        def get(self, key: str, default: str | None = None) -> str | None:
            return variables.get(key, default)

    env = nightly.dag.get_template_env()
    return env.from_string(template).render(params=params, var={"value": Accessor()})


@pytest.mark.parametrize(
    "name", ["root", "scripts", "sweep_epochs", "final_epochs", "final_step_seconds", "max_trials", "starting_deadline"]
)
def test_a_run_without_conf_takes_each_setting_from_its_variable_else_its_default(nightly, name):
    """A scheduled run has no conf: its storage root, scripts folder and size come from the Variables
    ``nightly_training_<param>`` (what the README says to set), else the defaults a real cluster's image needs."""
    tasks = nightly.dag.task_dict
    template, shape, default = {
        "root": (nightly.ROOT, "{}", "/tmp/airflow-elastic/nightly"),
        "scripts": (tasks["prepare"].stage.command[1], "{}/prepare_digits.py", "/workspace/scripts"),
        "sweep_epochs": (tasks["sweep"].group.env["EPOCHS"], "{}", "6"),
        "final_epochs": (tasks["train"].group.env["EPOCHS"], "{}", "100"),
        "final_step_seconds": (tasks["train"].group.env["STEP_SECONDS"], "{}", "0"),
        "max_trials": (tasks["sweep"].max_trials, "{}", "6"),
        "starting_deadline": (tasks["prepare"].starting_deadline, "{}", str(4 * 3600)),  # a night starts by 06:00
    }[name]
    params = nightly.dag.params.dump()
    assert params[name] in ("", None)  # the DAG's own default leaves it to the Variable
    variable = {f"nightly_training_{name}": "7"}
    assert render(nightly, template, params, {}) == shape.format(default)
    assert render(nightly, template, params, variable) == shape.format("7")
    assert render(nightly, template, {**params, name: "8"}, variable) == shape.format("8")  # a run's conf wins
    assert render(nightly, template, {**params, name: 0}, variable) == shape.format("0")  # even a zero


def test_cluster_up_names_the_scripts_variable_of_the_nightly_image(nightly):
    """``cluster up`` prints the Variable the DAG reads: the folder of the mapped digits image's script, whatever
    the interpreter is called (``python`` in the map file, an absolute path as ``make demo`` maps it)."""
    import sys

    from airflow_elastic.localcluster.cli import SCRIPTS_VARIABLES, scripts_variables

    assert SCRIPTS_VARIABLES[nightly.DIGITS_IMAGE] == nightly.SCRIPTS_VARIABLE
    script = str(ROOT / "dags" / "scripts" / "train_digits.py")
    expected = [f"AIRFLOW_VAR_{nightly.SCRIPTS_VARIABLE.upper()}={ROOT / 'dags' / 'scripts'}"]
    for python in ("python", sys.executable):
        assert scripts_variables({nightly.DIGITS_IMAGE: [python, script]}) == expected
    assert scripts_variables({"other/image:1": ["python", script]}) == []
