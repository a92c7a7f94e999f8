"""kubectl 1.32 with default flags against the local cluster: apply, get, describe, logs, delete."""

from __future__ import annotations

import json
import re
import time

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


TABLE_OBJECTS = """
apiVersion: v1
kind: Pod
metadata: {name: done}
spec: {restartPolicy: Never, containers: [{name: m, image: busybox, command: ["true"]}]}
---
apiVersion: v1
kind: Pod
metadata: {name: broken}
spec: {restartPolicy: Never, containers: [{name: m, image: busybox, command: ["false"]}]}
---
apiVersion: v1
kind: Pod
metadata: {name: crashy}
spec: {restartPolicy: Always, containers: [{name: m, image: busybox, command: ["false"]}]}
---
apiVersion: v1
kind: Pod
metadata: {name: unpulled}
spec: {restartPolicy: Never, containers: [{name: m, image: not-mapped:1}]}
---
apiVersion: v1
kind: Pod
metadata: {name: mounting}
spec:
  restartPolicy: Never
  volumes: [{name: cfg, configMap: {name: missing}}]
  containers: [{name: m, image: busybox, command: ["true"], volumeMounts: [{name: cfg, mountPath: /cfg}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: stubborn}
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: m
    image: busybox
    command: [python, -c, "import signal, time; signal.signal(15, signal.SIG_IGN); time.sleep(60)"]
---
apiVersion: batch/v1
kind: Job
metadata: {name: once}
spec: {template: {spec: {restartPolicy: Never, containers: [{name: m, image: busybox, command: ["true"]}]}}}
---
apiVersion: v1
kind: Service
metadata: {name: headless}
spec: {clusterIP: None, selector: {app: x}, ports: [{port: 80}]}
"""


def table(kubectl, *args: str) -> tuple[list[str], dict[str, list[str]]]:
    """``kubectl get`` output: the header and each row's cells by its first column (cells split on 2+ spaces)."""
    lines = kubectl("get", *args).stdout.splitlines()
    split = [[cell.strip() for cell in re.split(r"\s{2,}", line.strip())] for line in lines]
    return split[0], {row[0]: row for row in split[1:]}


def wait_for_table(kubectl, args: tuple[str, ...], check, timeout: float = 30.0) -> dict[str, list[str]]:
    deadline = time.monotonic() + timeout
    while True:
        _, rows = table(kubectl, *args)
        if check(rows) or time.monotonic() > deadline:
            return rows
        time.sleep(0.2)


def test_kubectl_get_tables_as_upstream_printers(kubectl, namespace):
    """Server-side Tables as ``printers.go`` prints them: pod STATUS from container reasons, nodes, jobs, events,
    services."""
    kubectl("apply", "-n", namespace, "-f", "-", stdin=TABLE_OBJECTS)
    expected = {
        "done": "Completed",
        "broken": "Error",
        "crashy": "CrashLoopBackOff",
        "unpulled": "ImagePullBackOff",
        "mounting": "ContainerCreating",
        "stubborn": "Running",
    }
    pods = ("-n", namespace, "pods")
    rows = wait_for_table(kubectl, pods, lambda r: all(r.get(n, [""] * 3)[2] == s for n, s in expected.items()))
    assert {name: rows[name][2] for name in expected} == expected
    assert table(kubectl, *pods)[0] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert rows["stubborn"][1] == "1/1" and rows["done"][1] == "0/1"
    assert re.fullmatch(r"[1-9]\d* \(\d+s ago\)", rows["crashy"][3]), rows["crashy"]  # restarts, and when last
    kubectl("delete", "-n", namespace, "pod", "stubborn", "--wait=false")
    rows = wait_for_table(kubectl, pods, lambda r: r["stubborn"][2] == "Terminating")
    assert rows["stubborn"][2] == "Terminating"  # SIGTERM is ignored: it stays until the grace period ends
    header, wide = table(kubectl, *pods, "-o", "wide")
    assert header[5:] == ["IP", "NODE", "NOMINATED NODE", "READINESS GATES"]
    assert wide["done"][6] in {row[0] for row in table(kubectl, "nodes")[1].values()}

    header, nodes = table(kubectl, "nodes")
    assert header == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    # An on-demand node of the session cluster (a test that reclaimed one left a replacement, ondemand-r<n>).
    node = nodes[min(name for name in nodes if name.startswith("ondemand-"))]
    assert node[1:3] == ["Ready", "<none>"] and node[4].startswith("v1."), nodes

    jobs = ("-n", namespace, "jobs")
    rows = wait_for_table(kubectl, jobs, lambda r: r.get("once", [""] * 2)[1] == "Complete")
    assert table(kubectl, *jobs)[0] == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    assert rows["once"][1:3] == ["Complete", "1/1"] and re.fullmatch(r"\d+s", rows["once"][3])

    lines = kubectl("get", "-n", namespace, "events").stdout.splitlines()
    assert re.split(r"\s{2,}", lines[0].strip()) == ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    failed = [re.split(r"\s{2,}", line.strip()) for line in lines if "pod/unpulled" in line and "Failed" in line]
    assert ["Warning", "Failed", "pod/unpulled", "Error: ImagePullBackOff"] in [row[1:] for row in failed]

    header, services = table(kubectl, "-n", namespace, "services")
    assert header == ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"]
    assert services["headless"][1:5] == ["ClusterIP", "None", "<none>", "80/TCP"]
