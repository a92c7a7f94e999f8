"""One task per trial: parameter lists for mapping, picking the best result, and a group as one trial."""

from __future__ import annotations

import json

import pytest

from airflow_elastic import Checkpointing, Role, TrainingGroup, runtime
from airflow_elastic.sweeps import choice, loguniform, randint, select_best, sweep_params, uniform
from airflow_elastic.training.render import render_jobset
from airflow_elastic.training.render.trial import TrialGroup, params_digest, trial_group, trial_labels
from airflow_elastic.training.spec import SpecError
from tests.support.builders import group

SPACE = {"hidden": choice([32, 64]), "layers": randint(1, 2)}


def test_grid_params_for_expand():
    assert sweep_params(SPACE) == [
        {"hidden": 32, "layers": 1},
        {"hidden": 32, "layers": 2},
        {"hidden": 64, "layers": 1},
        {"hidden": 64, "layers": 2},
    ]
    assert len(sweep_params(SPACE, n=3)) == 3


def test_random_params_are_the_same_at_every_parse():
    space = {"lr": loguniform(1e-4, 1e-1), "dropout": uniform(0, 0.5), **SPACE}
    first = sweep_params(space, algorithm="random", n=5, seed=3)
    assert (
        first
        == sweep_params(space, algorithm="random", n=5, seed=3)
        != sweep_params(space, algorithm="random", n=5, seed=4)
    )
    assert all(1e-4 <= p["lr"] <= 1e-1 and p["layers"] in (1, 2) for p in first)


@pytest.mark.parametrize(
    ("kwargs", "where"),
    [
        ({"algorithm": "tpe"}, "algorithm"),
        ({"algorithm": "random", "seed": 1}, "n: random search needs"),
        ({"algorithm": "random", "n": 3}, "seed: random search needs a seed"),
        ({"n": 0}, "n: must be an integer"),
    ],
)
def test_sweep_params_refuses_bad_input(kwargs, where):
    with pytest.raises(SpecError, match=where):
        sweep_params(SPACE, **kwargs)


def result(value, params):
    return {"name": "t", "state": "Succeeded", "metrics": {"val_loss": value}, "trial_params": params}


def test_select_best_picks_by_the_objective():
    results = [result(0.5, {"a": 1}), None, {"metrics": {}}, result(0.2, {"a": 2}), result(0.2, {"a": 3})]
    best = select_best(results, "val_loss", "min")
    assert (best["index"], best["best_value"], best["best_params"]) == (3, 0.2, {"a": 2})
    assert select_best(results, "val_loss", "max")["index"] == 0


def test_select_best_says_when_no_result_has_the_objective():
    with pytest.raises(ValueError, match=r"no result reported a number as 'val_loss'.*\['acc'\]"):
        select_best([{"metrics": {"acc": 0.9}}, {"metrics": {"val_loss": "n/a"}}], "val_loss", "min")


def templated_group() -> TrainingGroup:
    return group(
        roles=[
            Role("leader", args=["--lr", "{{ trial.params.lr }}", "--run", "{{ ds }}", "--n={{trial.number}}"]),
            Role("worker", replicas=2, env={"HIDDEN": "{{ trial.params['hidden'] }}", "SWEEP": "{{ trial.sweep }}"}),
        ],
        checkpoint=Checkpointing("s3://bucket/ckpt/"),
    )


def test_trial_group_carries_params_strings_and_its_own_checkpoints():
    trial = trial_group(templated_group(), {"lr": 0.001, "hidden": 64}, number=7, sweep="nightly")
    assert isinstance(trial, TrialGroup) and trial.trial_number == 7
    assert trial.leader.args == ("--lr", "0.001", "--run", "{{ ds }}", "--n=7")  # Airflow's Jinja left alone
    assert trial.role("worker").env == {"HIDDEN": "64", "SWEEP": "nightly"}
    assert trial.checkpoint.uri == f"s3://bucket/ckpt/nightly/trial-7-{params_digest({'hidden': 64, 'lr': 0.001})}"
    again = trial.with_changes(image="other:2")
    assert isinstance(again, TrialGroup) and again.trial_params == {"lr": 0.001, "hidden": 64}


def test_rendered_pods_get_the_params_as_json_that_the_runtime_reads():
    trial = trial_group(group(), {"lr": 0.001, "opt": {"name": "adam"}}, number=1, sweep="s")
    manifest = render_jobset(trial, name="train-abcdef")
    for rjob in manifest["spec"]["replicatedJobs"]:
        container = rjob["template"]["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        assert json.loads(env["AE_TRIAL_PARAMS"]) == {"lr": 0.001, "opt": {"name": "adam"}}
        assert runtime.context(env).trial_params == {"lr": 0.001, "opt": {"name": "adam"}}
    plain = render_jobset(group(), name="train-abcdef")
    assert "AE_TRIAL_PARAMS" not in json.dumps(plain)


def test_trial_group_refuses_unknown_references_and_non_json_params():
    with pytest.raises(SpecError, match=r"trial.params: .*names no parameter; known: \['hidden'\]"):
        trial_group(templated_group(), {"hidden": 64}, number=1, sweep="s")
    with pytest.raises(SpecError, match="trial_params: must be a JSON object"):
        trial_group(group(), {"f": object()}, number=1, sweep="s")


def test_trial_labels():
    assert trial_labels("nightly.sweep", 3) == {
        "airflow-elastic.io/sweep": "nightly.sweep",
        "airflow-elastic.io/trial": "3",
    }
    with pytest.raises(SpecError, match="sweep: 'no spaces'"):
        trial_labels("no spaces", 1)
