"""BatchStage: a pure spec, validated at construction with SpecError naming the field."""

from __future__ import annotations

import datetime
import subprocess
import sys

import pytest

from airflow_elastic import BatchStage, Placement, Resources, SpecError


def stage(**changes) -> BatchStage:
    return BatchStage(
        **{"name": "prepare-data", "image": "python:3.12", "command": ["python", "-c", "pass"], **changes}
    )


def problems(**changes) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as raised:
        stage(**changes)
    return raised.value.problems


def test_the_issue_example_builds_and_freezes_its_lists():
    command = ["python", "-m", "prep"]
    built = BatchStage(
        "prepare-data",
        image="trainer:1",
        command=command,
        resources=Resources(cpu="2", memory="4Gi"),
        placement=Placement(node_selector={"pool": "cpu"}, priority_class="batch-low"),
        parallelism=4,
        completions=4,
    )
    command.append("--changed")
    assert built.command == ("python", "-m", "prep")
    assert built.indexed and not stage().indexed


def test_durations_accept_timedeltas():
    built = stage(active_deadline=datetime.timedelta(minutes=5), ttl_after_finished=datetime.timedelta(hours=1))
    assert (built.active_deadline, built.ttl_after_finished) == (300, 3600)


@pytest.mark.parametrize(
    ("changes", "path", "words"),
    [
        ({"name": "Prepare"}, "name", "DNS-1035"),
        ({"name": "a" * 57}, "name", "too long"),
        ({"name": "a" * 54, "completions": 100, "parallelism": 1}, "name", "<job>-99"),
        ({"image": ""}, "image", "non-empty"),
        ({"command": "python prep.py"}, "command", "not one string"),
        ({"parallelism": 0}, "parallelism", "positive"),
        ({"completions": 2, "parallelism": 3}, "parallelism", "more than completions"),
        ({"completions": True}, "completions", "positive integer"),
        ({"backoff_limit": -1}, "backoff_limit", ">= 0"),
        ({"active_deadline": 0}, "active_deadline", ">= 1"),
        ({"ttl_after_finished": 1.5}, "ttl_after_finished", "whole seconds"),
        ({"resources": Resources(cpu="lots")}, "resources.cpu", "quantity"),
        ({"resources": {"cpu": "1"}}, "resources", "expected Resources"),
        ({"placement": Placement(priority_class="Batch Low")}, "placement.priority_class", "PriorityClass"),
        ({"placement": Placement(tolerations=[{"key": "x", "operator": "Maybe"}])}, "placement.tolerations[0]", ""),
        (
            {"placement": Placement(exclusive_topology="kubernetes.io/hostname")},
            "placement.exclusive_topology",
            "JobSet",
        ),
        ({"env": {"AE_RANK": "3"}}, "env['AE_RANK']", "environment contract"),
        ({"env": {"N": 3}}, "env['N']", "string"),
        ({"pod_overrides": {"spec": {"nodeSelector": {"a": "b"}}}}, "pod_overrides.spec.nodeSelector", "placement"),
        ({"pod_overrides": {"spec": {"volumez": []}}}, "pod_overrides.spec.volumez", "unknown PodSpec field"),
    ],
)
def test_each_rule_names_the_field(changes, path, words):
    found = problems(**changes)
    assert any(p == path or p.startswith(path + ".") for p, _ in found), found
    assert any(words in message for p, message in found if p.startswith(path)), found


def test_every_problem_is_listed_at_once():
    found = dict(problems(name="Bad", parallelism=0, env={"AE_GROUP": "x"}))
    assert {"name", "parallelism", "env['AE_GROUP']"} <= set(found)


def test_importing_the_package_and_building_a_stage_loads_neither_airflow_nor_kubernetes():
    code = (
        "import sys; from airflow_elastic import BatchStage; "
        "BatchStage('s', image='i', command=['true']); "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('airflow', 'kubernetes', 'jsonschema')]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
