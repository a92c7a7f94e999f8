"""A valid sweep for operator tests."""

from __future__ import annotations

from airflow_elastic import Role, TrainingGroup
from airflow_elastic.sweeps import uniform

GROUP = TrainingGroup(name="sw", image="img", roles=[Role("leader", command=["python", "t.py"])])

GOOD = {"group": GROUP, "space": {"x": uniform(0, 1)}, "objective": "loss", "max_trials": 4}
