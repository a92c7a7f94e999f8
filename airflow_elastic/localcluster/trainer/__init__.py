"""Kubeflow Trainer v2 (trainer.kubeflow.org/v1alpha1) on the local cluster: how a TrainJob becomes a JobSet
(:mod:`.build`), its status (:mod:`.status`) and the default runtimes (:mod:`.runtimes`). Pure: no I/O.

Constants are kubeflow/trainer's (``pkg/constants/constants.go``, v2.3.0).
"""

from __future__ import annotations

GROUP = "trainer.kubeflow.org"
API_VERSION = f"{GROUP}/v1alpha1"
CONTROLLER_NAME = "trainer.kubeflow.org/trainjob-controller"  # util/trainjob.TrainJobControllerName
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER, NODE = "trainer", "node"
DATASET_INITIALIZER, MODEL_INITIALIZER = "dataset-initializer", "model-initializer"
INITIALIZER_VOLUME = "initializer"
SNAPSHOT_SUFFIX, SNAPSHOT_KEY = "-runtime-snapshot", "runtime"
TRAINER_PORT = 29500  # ContainerTrainerPort
TORCH_ENV = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")
TORCHTUNE_ENTRYPOINT = ["tune", "run"]
COMPLETION_INDEX_PATH = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
