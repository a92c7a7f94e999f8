"""JobSets and Jobs for in-process controller tests."""

from __future__ import annotations

from typing import Any

from tests.support.inprocess import Cluster, container


def rjob(name: str, replicas: int = 1, pods: int = 1, **extra: Any) -> dict[str, Any]:
    job_spec = extra.pop("job", {})
    pod_spec = {"containers": [container()], **extra.pop("pod", {})}
    return {
        "name": name,
        "replicas": replicas,
        **extra,
        "template": {
            "spec": {
                "parallelism": pods,
                "completions": pods,
                "backoffLimit": 0,
                **job_spec,
                "template": {"spec": pod_spec},
            }
        },
    }


def jobset(name: str, *rjobs: dict[str, Any], **spec: Any) -> dict[str, Any]:
    annotations = spec.pop("annotations", None)
    meta: dict[str, Any] = {"name": name, **({"annotations": annotations} if annotations else {})}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": meta,
        "spec": {"replicatedJobs": list(rjobs), **spec},
    }


async def finish(cluster: Cluster, job: str, phase: str = "Succeeded", **kwargs: Any) -> None:
    await cluster.run_all(job, phase, exit_code=0 if phase == "Succeeded" else kwargs.pop("exit_code", 1), **kwargs)
