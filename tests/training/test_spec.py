"""The spec objects themselves: defaults, immutability, helpers."""

from __future__ import annotations

import dataclasses

import pytest

from airflow_elastic import Checkpointing, FailurePolicy, Placement, Role, SpecError, SuccessPolicy, TrainingGroup
from tests.support.builders import group


def test_defaults():
    g = TrainingGroup("t", [Role("a")], image="x")
    assert g.success == SuccessPolicy("all", ())
    assert g.failure == FailurePolicy(max_failures=0, max_preemptions=10)
    assert g.placement == Placement()
    assert g.coordinator_port == 29500
    assert (g.leader.name, g.world_size) == ("a", 1)


def test_frozen_and_isolated_from_caller():
    env = {"A": "1"}
    roles = [Role("a", command=["python"])]
    g = TrainingGroup("t", roles, image="x", env=env)
    env["B"] = "2"
    roles.append(Role("b"))
    assert g.env == {"A": "1"} and len(g.roles) == 1
    assert isinstance(g.roles, tuple) and g.roles[0].command == ("python",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.name = "other"  # type: ignore[misc]


def test_role_lookup_and_fallbacks():
    spot = Placement(spot=True)
    g = group(
        placement=Placement(priority_class="p"),
        roles=[Role("leader", image="own"), Role("worker", placement=spot)],
    )
    assert g.role("worker").placement is spot
    assert g.image_of(g.role("leader")) == "own" and g.image_of(g.role("worker")) == "example/trainer:1"
    assert g.placement_of(g.role("leader")).priority_class == "p"
    assert g.placement_of(g.role("worker")) is spot
    with pytest.raises(KeyError, match="no role 'nope'"):
        g.role("nope")


def test_with_changes_revalidates():
    g = group()
    assert g.with_changes(image="new").image == "new"
    with pytest.raises(SpecError, match=r"roles\[0\].image"):
        g.with_changes(image=None)


def test_templated_strings_are_accepted():
    g = group(
        image="{{ params.image }}",
        env={"LR": "{{ params.lr }}"},
        roles=[Role("leader", args=["--run", "{{ run_id }}"])],
    )
    assert g.env["LR"] == "{{ params.lr }}"
    assert group(checkpoint=Checkpointing("{{ var.value.bucket }}/ckpt")).checkpoint.uri.endswith("/ckpt")
