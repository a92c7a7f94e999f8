"""What the JobSet and Job controllers make of a JobSet manifest, for tests: the pods with the labels and
annotations of ``docs/jobset.md`` §6-7, and their environment after the downward API is resolved. Independent of
the renderer."""

from __future__ import annotations

import re
from typing import Any

JS = "jobset.sigs.k8s.io"
_FIELD = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")


def expand(js: dict[str, Any], *, restart_attempt: int = 0) -> list[dict[str, Any]]:
    name, namespace = js["metadata"]["name"], js["metadata"].get("namespace", "default")
    spec = js["spec"]
    subdomain = spec.get("network", {}).get("subdomain", name)
    rjobs = spec["replicatedJobs"]
    total = sum(r.get("replicas", 1) for r in rjobs)
    pods, global_index = [], 0
    for r in rjobs:
        replicas = r.get("replicas", 1)
        job_spec = r["template"]["spec"]
        for j in range(replicas):
            job = f"{name}-{r['name']}-{j}"
            keys = {
                f"{JS}/jobset-name": name,
                f"{JS}/replicatedjob-name": r["name"],
                f"{JS}/replicatedjob-replicas": str(replicas),
                f"{JS}/global-replicas": str(total),
                f"{JS}/job-index": str(j),
                f"{JS}/job-global-index": str(global_index),
                f"{JS}/restart-attempt": str(restart_attempt),
            }
            for p in range(job_spec.get("completions", 1)):
                template = job_spec["template"]
                labels = {**template["metadata"].get("labels", {}), **keys}
                annotations = {
                    **template["metadata"].get("annotations", {}),
                    **keys,
                    "batch.kubernetes.io/job-completion-index": str(p),
                }
                pods.append(
                    {
                        "metadata": {
                            "name": f"{job}-{p}-abcde",
                            "namespace": namespace,
                            "labels": labels,
                            "annotations": annotations,
                        },
                        "spec": {**template["spec"], "hostname": f"{job}-{p}", "subdomain": subdomain},
                    }
                )
            global_index += 1
    return pods


def env_of(pod: dict[str, Any], container: str = "trainer") -> dict[str, str]:
    """The container's environment as the kubelet would set it (value or downward-API fieldRef)."""
    (spec,) = [c for c in pod["spec"]["containers"] if c["name"] == container]
    env = {}
    for var in spec.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
            continue
        path = var["valueFrom"]["fieldRef"]["fieldPath"]
        if path in ("metadata.namespace", "metadata.name"):
            env[var["name"]] = pod["metadata"][path.split(".")[1]]
        else:
            kind, key = _FIELD.match(path).groups()
            env[var["name"]] = pod["metadata"][kind][key]
    return env
