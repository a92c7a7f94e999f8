"""The seeded preemption schedule mixes styles (``style=[...]``) without moving its reclaim times or nodes."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.config import NodePool
from airflow_elastic.localcluster.faults.schedule import PreemptionSchedule
from airflow_elastic.localcluster.kubelet.nodes import POOL_LABEL


class Disruptions:
    """The part of ``Disruptions`` the schedule uses: a pool of nodes that are never taken away, and a record."""

    def __init__(self) -> None:
        self.config = SimpleNamespace(pools=[NodePool("spot", count=3)])
        nodes = [{"metadata": {"name": f"spot-{i}", "labels": {POOL_LABEL: "spot"}}, "spec": {}} for i in range(3)]
        self.store = SimpleNamespace(items=lambda res: nodes)
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def preempt_node(self, node: str, style: str, **options: Any) -> None:
        self.calls.append((node, style, options))


def run(reclaims: int, **settings: Any) -> list[tuple[str, str, dict[str, Any]]]:
    async def go() -> list[tuple[str, str, dict[str, Any]]]:
        disruptions = Disruptions()
        schedule = PreemptionSchedule(disruptions)
        schedule.start({"spot": 0.002}, seed=3, replace_after=None, **settings)
        while len(disruptions.calls) < reclaims:
            await asyncio.sleep(0.001)
        schedule.stop()
        return disruptions.calls[:reclaims]

    return asyncio.run(go())


def test_a_mix_draws_each_reclaims_style_and_its_options_from_the_seed():
    options = {"gke": {"grace_seconds": 1}, "vanish": {"unreachable_after": 2}}
    mixed = run(30, style=["gke", "vanish"], options=options)
    assert {style for _, style, _ in mixed} == {"gke", "vanish"}
    assert all(opts == {"replace_after": None, **options[style]} for _, style, opts in mixed)
    assert mixed == run(30, style=["gke", "vanish"], options=options)  # seeded
    # The nodes (and times) are those of the single-style schedule with the same seed.
    assert [node for node, _, _ in mixed] == [node for node, _, _ in run(30, style="gke")]


def test_a_mix_refuses_options_of_other_styles_and_unknown_styles():
    async def start(**settings: Any) -> None:
        PreemptionSchedule(Disruptions()).start({"spot": 1.0}, **settings)

    with pytest.raises(errors.BadRequest, match="keyed by its styles"):
        asyncio.run(start(style=["gke", "vanish"], options={"eks": {}}))
    with pytest.raises(errors.BadRequest, match="unknown preemption style"):
        asyncio.run(start(style=["gke", "nope"]))
