"""kubectl 1.32 with default flags against the local cluster: apply, get, describe, logs, delete."""

from __future__ import annotations

import json

CONFIGMAP = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  labels: {app: demo}
data:
  lr: "0.1"
"""

JOBSET = """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: train
spec:
  replicatedJobs:
  - name: workers
    replicas: 1
    template:
      spec:
        parallelism: 2
        completions: 2
        template:
          spec:
            restartPolicy: Never
            containers:
            - name: trainer
              image: trainer:1
              command: ["python", "-c", "print('hi')"]
"""


def test_configmap_apply_get_describe_delete(kubectl, local_cluster, namespace):
    mark = local_cluster.request_count()
    assert "configmap/settings created" in kubectl("apply", "-n", namespace, "-f", "-", stdin=CONFIGMAP).stdout
    creates = local_cluster.requests(since=mark, verb="create", resource="configmaps", namespace=namespace)
    assert len(creates) == 1 and "fieldValidation=Strict" in creates[0]["query"]
    changed = CONFIGMAP.replace('"0.1"', '"0.2"')
    assert "configmap/settings configured" in kubectl("apply", "-n", namespace, "-f", "-", stdin=changed).stdout
    got = json.loads(kubectl("get", "-n", namespace, "configmap", "settings", "-o", "json").stdout)
    assert got["data"] == {"lr": "0.2"} and got["metadata"]["labels"] == {"app": "demo"}
    table = kubectl("get", "-n", namespace, "configmaps", "-l", "app=demo").stdout.split()
    assert table[:3] == ["NAME", "DATA", "AGE"] and "settings" in table
    described = kubectl("describe", "-n", namespace, "configmap", "settings").stdout
    assert "Name:         settings" in described and "0.2" in described
    assert 'configmap "settings" deleted' in kubectl("delete", "-n", namespace, "configmap", "settings").stdout
    assert kubectl("get", "-n", namespace, "configmap", "settings", check=False).returncode != 0


def test_jobset_apply_get_describe_delete(kubectl, custom, namespace):
    assert "jobset.jobset.x-k8s.io/train created" in kubectl("apply", "-n", namespace, "-f", "-", stdin=JOBSET).stdout
    obj = custom.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", "train")
    job = obj["spec"]["replicatedJobs"][0]
    assert job["template"]["spec"]["parallelism"] == 2 and job["replicas"] == 1
    labelled = JOBSET.replace("name: train\n", "name: train\n  labels: {team: ml}\n", 1)
    assert "configured" in kubectl("apply", "-n", namespace, "-f", "-", stdin=labelled).stdout
    got = json.loads(kubectl("get", "-n", namespace, "jobsets", "train", "-o", "json").stdout)
    assert got["metadata"]["labels"] == {"team": "ml"} and got["metadata"]["uid"] == obj["metadata"]["uid"]
    assert "train" in kubectl("get", "-n", namespace, "jobsets").stdout
    assert "Replicated Jobs:" in kubectl("describe", "-n", namespace, "jobset", "train").stdout
    kubectl("delete", "-n", namespace, "-f", "-", stdin=JOBSET)
    assert "No resources found" in kubectl("get", "-n", namespace, "jobsets").stderr


def test_apply_rejects_unknown_fields(kubectl, namespace):
    typo = JOBSET.replace("replicas: 1", "replicas: 1\n    replica: 2")
    result = kubectl("apply", "-n", namespace, "-f", "-", stdin=typo, check=False)
    assert result.returncode != 0
    assert 'strict decoding error: unknown field "spec.replicatedJobs[0].replica"' in result.stderr


def test_logs_follow_tail_and_previous(kubectl, core, namespace):
    script = "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.1)"
    pod = {
        "metadata": {"name": "p"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "python:3", "command": ["python", "-c", script]}],
        },
    }
    core.create_namespaced_pod(namespace, pod)
    assert kubectl("logs", "-n", namespace, "-f", "p").stdout == "0\n1\n2\n"  # follows until the pod ends
    assert kubectl("logs", "-n", namespace, "p", "--tail=1").stdout == "2\n"
    raw = core.read_namespaced_pod_log("p", namespace, container="c", tail_lines=2, _preload_content=False)
    assert raw.data == b"1\n2\n"  # (the client's own decoding would json-parse the text)
    previous = kubectl("logs", "-n", namespace, "p", "--previous", check=False)
    assert previous.returncode != 0 and "previous terminated container" in previous.stderr
