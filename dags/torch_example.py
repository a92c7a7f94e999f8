"""What the PyTorch example DAGs share (``example_torch_ddp``, ``example_trainjob``): the trainer image, the
trainer's settings as environment, and the DAG params that fill them in. No DAG here."""

from __future__ import annotations

from airflow.sdk import Param

from airflow_elastic import Placement, Resources

#: The trainer image: torch 2.13 (CPU) and ``train_torch.py``; its entrypoint is ``python /app/train_torch.py``.
TORCH_TRAINER_IMAGE = "ghcr.io/airflow-elastic/torch-trainer:0.1.0"
RESOURCES = Resources(cpu="500m", memory="1Gi")
SPOT = Placement(spot=True)
ENV = {
    "TRAIN_STEPS": "{{ params.steps }}",
    "STEP_SECONDS": "{{ params.step_seconds }}",
    "CHECKPOINT_EVERY": "{{ params.checkpoint_every }}",
    "PYTHONUNBUFFERED": "1",
}


def torch_params(group_name: str) -> dict[str, Param]:
    """The params ``ENV`` and the trainer's command read; checkpoints default under a folder named after the group."""
    return {
        "steps": Param(40, type="integer", minimum=1, description="target step count"),
        "step_seconds": Param(0.1, type="number", minimum=0, description="extra time per step (simulated)"),
        "checkpoint_every": Param(10, type="integer", minimum=1, description="steps between checkpoints"),
        "checkpoint_root": Param(
            f"/tmp/airflow-elastic/checkpoints/{group_name}",
            type="string",
            description="checkpoints of a run go to <checkpoint_root>/<run id> (a path or URI every pod reaches)",
        ),
        "script": Param("/app/train_torch.py", type="string", description="the trainer's path in the image"),
    }
