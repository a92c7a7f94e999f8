"""Airflow provider registration (entry point ``apache_airflow_provider``). Imports nothing heavy."""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    """Provider metadata read by Airflow's ProvidersManager (``airflow providers list``)."""
    from airflow_elastic import __version__

    return {
        # Must equal the canonical distribution name, or provider discovery raises.
        "package-name": "airflow-elastic",
        "name": "Elastic training",
        # Only what the package contains (tests/package/test_provider_info.py maps each claim to the code behind it).
        "description": (
            "Distributed ML training on Kubernetes JobSets: training groups, batch stages, preemption "
            "classification, checkpoint resume, model publishing to KServe and an embedded local cluster."
        ),
        "versions": [__version__],
        # "how-to-guide": the how-to pages of the docs site (docs/howto/), as repository paths like the cncf provider's.
        "integrations": [
            {
                "integration-name": "Kubernetes JobSet",
                "external-doc-url": "https://jobset.sigs.k8s.io/",
                "how-to-guide": [
                    "/docs/howto/training-group.md",
                    "/docs/howto/sweep.md",
                    "/docs/howto/sensor.md",
                ],
                "tags": ["software"],
            },
            {
                "integration-name": "Kubernetes Job",
                "external-doc-url": "https://kubernetes.io/docs/concepts/workloads/controllers/job/",
                "how-to-guide": ["/docs/howto/batch-stage.md"],
                "tags": ["software"],
            },
            {
                "integration-name": "Kubernetes CronJob",
                "external-doc-url": "https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/",
                "how-to-guide": ["/docs/howto/cronjob.md"],
                "tags": ["software"],
            },
            {
                "integration-name": "KServe InferenceService",
                "external-doc-url": "https://kserve.github.io/website/",
                "how-to-guide": ["/docs/howto/inference-service.md"],
                "tags": ["software"],
            },
            {
                "integration-name": "KubeRay RayJob",
                "external-doc-url": "https://docs.ray.io/en/latest/cluster/kubernetes/index.html",
                "tags": ["software"],
            },
        ],
        # The hooks reuse the cncf provider's `kubernetes` connection type: no connection type of our own.
        "operators": [
            {
                "integration-name": "Kubernetes JobSet",
                "python-modules": [
                    "airflow_elastic.operators.training.training_group",
                    "airflow_elastic.operators.sweeps.operator",
                ],
            },
            {
                "integration-name": "Kubernetes Job",
                "python-modules": ["airflow_elastic.operators.stages.batch_stage"],
            },
            {
                "integration-name": "Kubernetes CronJob",
                "python-modules": ["airflow_elastic.operators.stages.cronjob"],
            },
            {
                "integration-name": "KServe InferenceService",
                "python-modules": ["airflow_elastic.operators.serving.inference_service"],
            },
            {
                "integration-name": "KubeRay RayJob",
                "python-modules": ["airflow_elastic.operators.ray.rayjob"],
            },
        ],
        "triggers": [
            {
                "integration-name": "Kubernetes JobSet",
                "python-modules": ["airflow_elastic.triggers.training_group", "airflow_elastic.triggers.sweep"],
            },
            {
                "integration-name": "Kubernetes Job",
                "python-modules": ["airflow_elastic.triggers.batch_stage"],
            },
            {
                "integration-name": "KServe InferenceService",
                "python-modules": ["airflow_elastic.triggers.inference_service"],
            },
            {
                "integration-name": "KubeRay RayJob",
                "python-modules": ["airflow_elastic.triggers.ray"],
            },
        ],
        "sensors": [
            {
                "integration-name": "Kubernetes JobSet",
                "python-modules": ["airflow_elastic.sensors.training_group"],
            }
        ],
        # Buttons on a task instance in the UI (Airflow 3 keeps each URL in XCom when the task ends).
        "extra-links": [
            "airflow_elastic.operators.links.SweepReportLink",
            "airflow_elastic.operators.links.SweepPlotLink",
            "airflow_elastic.operators.links.RunReportLink",
            "airflow_elastic.operators.links.ServedEndpointLink",
        ],
        "hooks": [
            {
                "integration-name": "Kubernetes JobSet",
                "python-modules": [
                    "airflow_elastic.hooks.jobset",
                    "airflow_elastic.hooks.async_jobset",
                    "airflow_elastic.hooks.pods",
                    "airflow_elastic.hooks.async_pods",
                    "airflow_elastic.hooks.training_job",
                    "airflow_elastic.hooks.async_training_job",
                    "airflow_elastic.hooks.cluster",
                    "airflow_elastic.hooks.async_cluster",
                    "airflow_elastic.hooks.group",
                    "airflow_elastic.hooks.async_group",
                ],
            },
            {
                "integration-name": "Kubernetes Job",
                "python-modules": ["airflow_elastic.hooks.batch", "airflow_elastic.hooks.async_batch"],
            },
            {
                "integration-name": "KServe InferenceService",
                "python-modules": [
                    "airflow_elastic.hooks.inference_service",
                    "airflow_elastic.hooks.async_inference_service",
                ],
            },
            {
                "integration-name": "KubeRay RayJob",
                "python-modules": ["airflow_elastic.hooks.ray", "airflow_elastic.hooks.async_ray"],
            },
        ],
        "config": {
            "airflow_elastic": {
                "description": "How the provider's operators and triggers behave in a deployment.",
                "options": {
                    "defer_exit_hold": {
                        "description": (
                            "Seconds after a deferral during which a trigger holds a verdict it has already reached, "
                            "so that the worker's late report of the deferral cannot fail the resumed task "
                            "(apache/airflow#71580). Empty: [workers] min_heartbeat_interval plus 5 s; 0: no hold "
                            "(on an Airflow with that race fixed)."
                        ),
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "10",
                        "default": "",
                    },
                },
            },
        },
    }
