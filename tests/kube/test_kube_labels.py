"""The well-known keys live in ``airflow_elastic.kube.labels`` / ``kube.names``; the copies and old names agree."""

from airflow_elastic.kube import labels, names, platforms
from airflow_elastic.preemption import cascade, evidence, saved
from airflow_elastic.runtime import discovery
from airflow_elastic.serving import inference_service, rollout
from airflow_elastic.stages import cron, cronjob, job
from airflow_elastic.training import backends, state, validation
from airflow_elastic.training.render import jobset, pod, pytorchjob, trainjob, trial
from airflow_elastic.waiting import backend_views


def test_the_runtime_copy_of_jobsets_prefix_matches():
    # runtime/ runs in training pods and imports only the contract, so it keeps its own copy.
    assert discovery.JOBSET_LABEL == labels.JOBSET_DOMAIN == pod.JOBSET_LABEL
    assert labels.JOBSET_NAME_LABEL.startswith(f"{discovery.JOBSET_LABEL}/")


def test_old_names_are_the_kube_keys():
    assert (state.JOBSET_NAME_LABEL, state.ROLE_LABEL, state.RESTART_LABEL, state.JOB_INDEX_LABEL) == (
        labels.JOBSET_NAME_LABEL,
        labels.REPLICATED_JOB_LABEL,
        labels.RESTART_ATTEMPT_LABEL,
        labels.JOB_INDEX_LABEL,
    )
    assert (jobset.MANAGED_BY_LABEL, jobset.MANAGER, jobset.GROUP_LABEL, jobset.ROLE_LABEL, jobset.QUEUE_LABEL) == (
        labels.MANAGED_BY_LABEL,
        labels.MANAGER,
        labels.GROUP_LABEL,
        labels.GROUP_ROLE_LABEL,
        labels.QUEUE_LABEL,
    )
    assert jobset.EXCLUSIVE_TOPOLOGY == labels.EXCLUSIVE_TOPOLOGY_ANNOTATION
    assert pod.NODE_LOSS_TAINTS == cascade.NODE_DOWN_TAINTS == labels.NODE_LOSS_TAINTS
    assert trainjob.COMPLETION_INDEX == evidence.COMPLETION_INDEX == job.COMPLETION_INDEX
    assert job.COMPLETION_INDEX == labels.COMPLETION_INDEX_LABEL
    assert (pytorchjob.CONTAINER, pytorchjob.REPLICA_INDEX_LABEL) == (
        names.PYTORCH_CONTAINER,
        labels.KUBEFLOW_REPLICA_INDEX_LABEL,
    )
    assert (trial.SWEEP_LABEL, trial.TRIAL_LABEL) == (labels.SWEEP_LABEL, labels.TRIAL_LABEL)
    assert (job.STAGE_LABEL, cron.JOB_NAME_LABEL, cronjob.LAST_APPLIED) == (
        labels.STAGE_LABEL,
        labels.JOB_NAME_LABEL,
        labels.LAST_APPLIED_ANNOTATION,
    )
    assert saved.EVIDENCE_ANNOTATION == labels.EVIDENCE_ANNOTATION
    assert backend_views.PTJ_JOB_NAME_LABEL == labels.KUBEFLOW_JOB_NAME_LABEL
    assert (inference_service.MODE_ANNOTATION, inference_service.PREDICTOR_CONTAINER) == (
        labels.DEPLOYMENT_MODE_ANNOTATION,
        names.PREDICTOR_CONTAINER,
    )
    assert (rollout.SOURCE_URI_ANNOTATION, rollout.STORAGE_INITIALIZER) == (
        labels.STORAGE_SOURCE_URI_ANNOTATION,
        names.STORAGE_INITIALIZER_CONTAINER,
    )
    assert backends.TRAINER_NODE == names.TRAINER_NODE
    assert validation.TRAINER_CONTAINER == names.TRAINER_CONTAINER
    assert platforms.DOMAIN == labels.DOMAIN
