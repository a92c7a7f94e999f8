"""``TrainingGroupOperator(jobset=...)``: a user's manifest is judged when the DAG file is parsed, and again once
its templates are rendered."""

from __future__ import annotations

import copy

import pytest
import yaml

from airflow_elastic import SpecError
from airflow_elastic.operators import TrainingGroupOperator
from tests.support.operator_fakes import FakeHook, StateStore, TaskInstance

MANIFEST = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "metadata": {"name": "mine"},
    "spec": {
        "replicatedJobs": [
            {
                "name": "main",
                "replicas": 1,
                "template": {
                    "spec": {
                        "template": {
                            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "python:3.11"}]}
                        }
                    }
                },
            }
        ]
    },
}


def changed(path: str, value) -> dict:
    """``MANIFEST`` with the dotted ``path`` set to ``value`` (``[0]`` indexes a list)."""
    manifest = copy.deepcopy(MANIFEST)
    *parents, last = path.replace("[0]", ".0").split(".")
    node = manifest
    for key in parents:
        node = node[int(key)] if key.isdigit() else node[key]
    node[last] = value
    return manifest


def container(manifest: dict) -> dict:
    return manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]


def refused(jobset) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as raised:
        TrainingGroupOperator(task_id="t", jobset=jobset)
    return raised.value.problems


def test_a_valid_manifest_is_accepted_as_a_dict_and_as_yaml():
    TrainingGroupOperator(task_id="t", jobset=MANIFEST)
    TrainingGroupOperator(task_id="t", jobset=yaml.safe_dump(MANIFEST))


def test_a_job_is_not_a_jobset():
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"template": {}}}
    [(field, rule), *_] = refused(job)
    assert field == "jobset" and "'batch/v1', 'Job'" in rule and "replicatedJobs[].template" in rule


def test_bad_yaml_and_several_documents():
    [(field, rule)] = refused("apiVersion: jobset.x-k8s.io/v1alpha2\nkind: [JobSet\n")
    assert field == "jobset" and "not valid YAML" in rule
    [(field, rule)] = refused("a: 1\n---\nb: 2\n")
    assert "exactly one YAML document, got 2" in rule


@pytest.mark.parametrize("name", ["Bad_Name", "x" * 60])
def test_a_name_that_cannot_carry_the_run_suffix(name):
    [(field, rule)] = refused(changed("metadata.name", name))
    assert field == "jobset.metadata.name" and "DNS-1035 label of at most" in rule


def test_no_replicated_jobs():
    [(field, _)] = refused(changed("spec.replicatedJobs", []))
    assert field == "jobset.spec.replicatedJobs"


def test_the_crd_and_pod_schemas_apply():
    problems = refused(changed("spec.replicatedJobs[0].replicas", "two"))
    assert problems[0][0] == "jobset.spec.replicatedJobs[0].replicas", problems
    bad_port = copy.deepcopy(MANIFEST)
    container(bad_port)["ports"] = [{"containerPort": "http"}]
    [(field, _), *_] = refused(bad_port)
    assert field.startswith("jobset.spec.replicatedJobs[0].template.spec.template.spec.containers[0].ports"), field


def test_templated_parts_wait_for_rendering_the_rest_is_judged_now():
    templated = changed("spec.replicatedJobs[0].replicas", "{{ params.n }}")
    TrainingGroupOperator(task_id="t", jobset=templated)  # the schema is judged after rendering
    TrainingGroupOperator(task_id="t", jobset=changed("metadata.name", "{{ params.name }}"))
    # Valid YAML only once rendered (an unquoted template is a YAML flow mapping).
    TrainingGroupOperator(task_id="t", jobset=yaml.safe_dump(MANIFEST).replace("replicas: 1", "replicas: {{ n }}"))
    bad_kind = {**templated, "kind": "Job"}
    [(field, _)] = refused(bad_kind)
    assert field == "jobset"


def test_a_rendered_value_breaking_a_rule_fails_the_run():
    op = TrainingGroupOperator(task_id="t", jobset=changed("spec.replicatedJobs[0].replicas", "{{ params.n }}"))
    op.hook = lambda: FakeHook()  # type: ignore[method-assign]
    ctx = {"ti": TaskInstance(), "task_state_store": StateStore(), "params": {"n": "two"}}
    op.jobset = op.render_template(op.jobset, ctx)  # what render_template_fields does to the template field
    with pytest.raises(SpecError) as raised:
        op.execute(ctx)
    assert raised.value.problems[0][0] == "jobset.spec.replicatedJobs[0].replicas"
