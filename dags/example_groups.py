"""Example training groups, shared by the example DAGs (and rendered by ``make demo``).

``airflow-elastic render dags/example_groups.py`` prints their JobSets without any cluster.
"""

from airflow_elastic import (
    Checkpointing,
    FailurePolicy,
    Placement,
    Resources,
    Role,
    SuccessPolicy,
    TrainingGroup,
)

# The flagship: a leader on on-demand capacity coordinates GPU workers on spot nodes. The leader decides
# success; preemptions are absorbed (up to 20), genuine failures restart the group twice before failing.
# [START howto_llm_finetune]
llm_finetune = TrainingGroup(
    name="llm-finetune",
    image="ghcr.io/airflow-elastic/trainer:0.1.0",
    roles=[
        Role(
            "leader",
            command=["python", "-m", "trainer.fit"],
            args=["--config", "configs/llm.yaml"],
            resources=Resources(cpu="8", memory="32Gi", gpu=1),
        ),
        Role(
            "worker",
            replicas=4,
            command=["python", "-m", "trainer.fit"],
            args=["--config", "configs/llm.yaml"],
            resources=Resources(cpu="8", memory="32Gi", gpu=1),
            placement=Placement(spot=True, spot_platform="gke"),
        ),
    ],
    success=SuccessPolicy(mode="all", roles=("leader",)),
    failure=FailurePolicy(max_failures=2, max_preemptions=20),
    checkpoint=Checkpointing("gs://example-bucket/checkpoints/llm-finetune", keep=3),
    env={"PYTHONUNBUFFERED": "1"},
    # PyTorch's data loaders need a large /dev/shm; a memory-backed emptyDir provides it.
    pod_overrides={
        "spec": {
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}],
            "containers": [{"name": "trainer", "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}],
        }
    },
)
# [END howto_llm_finetune]

# The tiny trainer of the examples (dags/scripts/train_tiny.py): a leader coordinates two workers over TCP and
# reports final metrics. The image's entrypoint runs the script; on the local cluster an image map stands in for it.
# [START howto_tiny_trainer]
TINY_TRAINER_IMAGE = "ghcr.io/airflow-elastic/tiny-trainer:0.1.0"
tiny_trainer = TrainingGroup(
    name="tiny-trainer",
    image=TINY_TRAINER_IMAGE,
    roles=[
        Role("leader", resources=Resources(cpu="500m", memory="256Mi")),
        Role("worker", replicas=2, resources=Resources(cpu="500m", memory="256Mi")),
    ],
    success=SuccessPolicy(roles=("leader",)),
    failure=FailurePolicy(max_failures=1, max_preemptions=5),
    env={"TRAIN_STEPS": "5"},
)
# [END howto_tiny_trainer]

# A CPU-only group that runs anywhere (the local cluster included): two processes that rendezvous.
cpu_smoke = TrainingGroup(
    name="cpu-smoke",
    image="python:3.11-slim",
    roles=[Role("worker", replicas=2, command=["python", "-c", "import os; print(os.environ['AE_RANK'])"])],
    failure=FailurePolicy(max_failures=1, max_preemptions=5),
)
