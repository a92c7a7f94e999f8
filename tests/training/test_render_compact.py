"""The compact view of a JobSet (``rendered_jobset`` in the Airflow UI): what it keeps, and that it fits."""

from __future__ import annotations

import yaml

from airflow_elastic import Checkpointing, Placement, Resources, Role, TrainingGroup
from airflow_elastic.training.render import render_jobset
from airflow_elastic.training.render.compact import compact_view

GROUP = TrainingGroup(
    "tg",
    [
        Role("leader", command=["python", "train.py"], resources=Resources(cpu="2", memory="4Gi")),
        Role("worker", replicas=4, command=["python", "train.py"], placement=Placement(spot=True)),
    ],
    image="ghcr.io/acme/trainer:1",
    env={"TRAIN_STEPS": "100"},
    checkpoint=Checkpointing("s3://bucket/tg"),
)


def view(manifest: dict, limit: int = 4096) -> tuple[str, dict]:
    text = compact_view(manifest, limit=limit)
    return text, yaml.safe_load(text)


def test_roles_policies_and_the_users_env_are_kept():
    text, shown = view(render_jobset(GROUP, name="tg-abc123", namespace="team-a"))
    assert text.startswith("# JobSet team-a/tg-abc123") and "kubectl get jobset tg-abc123 -n team-a -o yaml" in text
    assert (shown["name"], shown["namespace"]) == ("tg-abc123", "team-a")
    leader, worker = shown["replicatedJobs"]["leader"], shown["replicatedJobs"]["worker"]
    assert leader["container"]["image"] == "ghcr.io/acme/trainer:1"
    assert leader["container"]["command"] == ["python", "train.py"]
    assert leader["container"]["resources"]["requests"] == {"cpu": "2", "memory": "4Gi"}
    assert leader["container"]["env"] == {"AE_CHECKPOINT_URI": "s3://bucket/tg", "TRAIN_STEPS": "100"}
    assert worker["replicas"] == 4 and worker["nodeSelector"]
    # How long a pod stays on a lost node is shown: the failure policy's 30 s, not the cluster's 300.
    assert worker["tolerations"] == [
        "airflow-elastic.io/spot:NoSchedule",
        "node.kubernetes.io/unreachable:NoExecute for 30s",
        "node.kubernetes.io/not-ready:NoExecute for 30s",
    ]
    assert shown["failurePolicy"]["rules"][0].startswith("RestartOnDisruption: ")


def test_a_view_too_long_is_shortened_until_it_fits():
    long = TrainingGroup(
        "tg",
        [Role(f"role{i}", command=["python", "-c", "x = 1\n" * 300]) for i in range(4)],
        image="i",
        env={f"VAR_{i}": "v" * 100 for i in range(30)},
    )
    manifest = render_jobset(long, name="tg-abc123", namespace="ns")
    text, shown = view(manifest, limit=2500)
    assert len(text) <= 2500 and len(yaml.safe_dump(manifest)) > 20000
    assert set(shown["replicatedJobs"]) == {f"role{i}" for i in range(4)}  # every role stays
