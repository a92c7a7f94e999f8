"""Per-run rendering of a group's templatable strings (pure: a plain function stands in for Jinja)."""

from __future__ import annotations

import pytest

from airflow_elastic import Checkpointing, Role, SpecError, TrainingGroup
from airflow_elastic.training.templating import has_template, render_group

VALUES = {"{{ params.steps }}": "7", "{{ ds }}": "2025-01-01", "{{ params.image }}": "trainer:2"}


def render(value: str) -> str:
    for template, rendered in VALUES.items():
        value = value.replace(template, rendered)
    return value


def group(**changes) -> TrainingGroup:
    spec = {
        "name": "t",
        "image": "{{ params.image }}",
        "roles": [
            Role("leader", command=["python", "fit.py", "--steps={{ params.steps }}"], args=["{{ ds }}"]),
            Role("worker", replicas=2, env={"DAY": "{{ ds }}"}, image="trainer:1"),
        ],
        "env": {"TRAIN_STEPS": "{{ params.steps }}", "PLAIN": "x"},
        "checkpoint": Checkpointing("s3://bucket/{{ ds }}/ckpt"),
    }
    return TrainingGroup(**{**spec, **changes})


def test_every_templatable_field_is_rendered_into_a_copy():
    original = group()
    rendered = render_group(original, render)
    assert rendered.image == "trainer:2"
    assert rendered.roles[0].command == ("python", "fit.py", "--steps=7")
    assert rendered.roles[0].args == ("2025-01-01",)
    assert rendered.roles[1].env == {"DAY": "2025-01-01"} and rendered.roles[1].image == "trainer:1"
    assert rendered.env == {"TRAIN_STEPS": "7", "PLAIN": "x"}
    assert rendered.checkpoint.uri == "s3://bucket/2025-01-01/ckpt"
    assert original.env["TRAIN_STEPS"] == "{{ params.steps }}"  # the DAG's spec is untouched


def test_an_untemplated_group_is_returned_as_is():
    plain = TrainingGroup("p", [Role("a", command=["python"])], image="x")
    assert render_group(plain, lambda value: pytest.fail(f"rendered {value!r}")) is plain


def test_non_string_results_become_strings():
    rendered = render_group(group(), lambda value: 7 if value == "{{ params.steps }}" else render(value))
    assert rendered.env["TRAIN_STEPS"] == "7"


def test_a_rendered_value_that_breaks_a_rule_names_the_field():
    with pytest.raises(SpecError) as raised:
        render_group(group(checkpoint=Checkpointing("/ckpt/{{ params.where }}")), lambda value: "relative")
    [(path, message)] = raised.value.problems
    assert path.startswith("checkpoint") and message.endswith("(after rendering templates)")


def test_has_template():
    assert has_template("a {{ x }}") and has_template("{% if x %}y{% endif %}")
    assert not has_template("plain") and not has_template(3) and not has_template(None)
