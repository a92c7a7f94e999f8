"""Objects for API server tests."""

from __future__ import annotations

JOBSET_GROUP, JOBSET_VERSION = "jobset.x-k8s.io", "v1alpha2"


def jobset(name: str, replicas: int = 2, **spec_extra) -> dict:
    return {
        "apiVersion": f"{JOBSET_GROUP}/{JOBSET_VERSION}",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": {"app": "train"}},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "template": {
                                "spec": {
                                    "restartPolicy": "Never",
                                    "containers": [{"name": "main", "image": "trainer:1", "command": ["true"]}],
                                }
                            }
                        }
                    },
                }
            ],
            **spec_extra,
        },
    }
