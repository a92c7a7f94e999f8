"""``rendered_jobset``, the operator's view of its JobSet on Airflow's "Rendered Template" page: short enough that
Airflow does not cut it, every role in it, and the real name and namespace."""

from __future__ import annotations

import collections

import pytest
from airflow.sdk._shared.template_rendering import TRUNCATE_PREFIX
from airflow.sdk.execution_time.task_runner import _serialize_template_field

from airflow_elastic.operators import TrainingGroupOperator
from airflow_elastic.operators import identity as ident
from airflow_elastic.preemption import attempts
from tests.support.operator_fakes import FakeHook, StateStore, TaskInstance
from tests.support.paths import ROOT


class ConnectionHook(FakeHook):
    """A hook whose connection names a namespace."""

    def get_namespace(self) -> str | None:
        return "team-a"


def example_operators() -> list[TrainingGroupOperator]:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert not bag.import_errors
    found = [t for dag in bag.dags.values() for t in dag.tasks if isinstance(t, TrainingGroupOperator)]
    assert found
    # In a stable order: the DagBag's differs between processes, and pytest-xdist workers must collect alike.
    return sorted(found, key=lambda t: (t.dag_id, t.task_id))


def render(op: TrainingGroupOperator, store: StateStore | None = None, hook: FakeHook | None = None) -> str:
    op.hook = lambda: hook or ConnectionHook()  # type: ignore[method-assign]
    # An upstream task's result for the templates that pull one (the nightly DAG's sweep), whatever they read.
    upstream = collections.defaultdict(str)
    ti = TaskInstance(dag_id=op.dag_id, task_id=op.task_id, pulled={"*": upstream})
    params = {k: op.params[k] for k in op.params}
    variables = {"value": {}, "json": {}}  # no Variables set: `var.value.get(key, default)` gives the default
    context = {"ti": ti, "task_state_store": store or StateStore(), "params": params, "run_id": ti.run_id}
    context["var"] = variables
    op.render_template_fields(context)  # type: ignore[arg-type]
    return op.rendered_jobset


@pytest.mark.parametrize("op", example_operators(), ids=lambda op: op.dag_id)
def test_the_examples_are_shown_whole_with_every_role(op):
    shown = render(op)
    stored = _serialize_template_field(shown, "rendered_jobset")  # what Airflow keeps for the UI
    assert not str(stored).startswith(TRUNCATE_PREFIX), len(shown)
    for role in op.group.roles:
        assert f"\n  {role.name}:\n" in shown, role.name
        assert role.image or op.group.image in shown
    name = ident.TaskIdentity.from_ti(TaskInstance(dag_id=op.dag_id, task_id=op.task_id)).name(op.group.name, 0)
    assert f"kubectl get {op.backend} {name} -n team-a -o yaml" in shown  # the real name and the connection's namespace
    assert "namespace: team-a" in shown


def test_the_view_names_the_group_a_cleared_task_will_submit():
    [op, *_] = example_operators()
    store = StateStore()
    store.set(ident.STATE_KEY, ident.Submission("old", "team-a", 2, "uid").record())
    assert "-n team-a" in render(op, store) and f"{op.group.name}-" in op.rendered_jobset
    running = ident.TaskIdentity.from_ti(TaskInstance(dag_id=op.dag_id, task_id=op.task_id))
    assert f"jobset {running.name(op.group.name, 2)} " in op.rendered_jobset  # adopted while it runs
    store.set(attempts.STATE_KEY, {"started": 1.0, "attempts": [], "finished": True})
    assert f"jobset {running.name(op.group.name, 3)} " in render(op, store)  # the task finished: the next name


def test_an_unresolvable_connection_leaves_a_placeholder():
    class Refusing(FakeHook):
        def get_namespace(self) -> str | None:
            raise RuntimeError("connection 'kubernetes_default' does not exist")

    [op, *_] = example_operators()
    assert "namespace: (the connection's namespace, else default)" in render(op, hook=Refusing())
