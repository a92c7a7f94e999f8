"""Rendering a TrainingGroup into a JobSet: structure, environment contract, placement, overrides, validity."""

from __future__ import annotations

import copy
import re

import pytest

from airflow_elastic import (
    Checkpointing,
    FailurePolicy,
    Placement,
    Resources,
    Role,
    SpecError,
    SuccessPolicy,
    TrainingGroup,
)
from airflow_elastic.kube import names, platforms
from airflow_elastic.kube.schema import schema_errors
from airflow_elastic.training.render import render_jobset
from tests.support.builders import group
from tests.support.jobset_expand import env_of, expand
from tests.support.jobset_webhook import webhook_errors

#: What every pod of a group gets by default (FailurePolicy.node_loss_toleration_seconds=30).
NODE_LOSS = [
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
]


def rjob(manifest: dict, name: str) -> dict:
    (found,) = [r for r in manifest["spec"]["replicatedJobs"] if r["name"] == name]
    return found


def pod_spec(manifest: dict, role: str) -> dict:
    return rjob(manifest, role)["template"]["spec"]["template"]["spec"]


def trainer(manifest: dict, role: str) -> dict:
    return pod_spec(manifest, role)["containers"][0]


def test_roles_become_replicated_jobs_of_single_pod_jobs():
    manifest = render_jobset(group(roles=[Role("leader"), Role("worker", replicas=3)]))
    assert [(r["name"], r["replicas"]) for r in manifest["spec"]["replicatedJobs"]] == [
        ("leader", 1),
        ("worker", 3),
    ]
    for r in manifest["spec"]["replicatedJobs"]:
        job = r["template"]["spec"]
        assert (job["completionMode"], job["completions"], job["parallelism"]) == ("Indexed", 1, 1)
        assert job["backoffLimit"] == 0  # gang: one failed pod fails its Job at once
        assert job["template"]["spec"]["restartPolicy"] == "Never"


def test_every_pod_gets_a_distinct_global_rank_and_role_rank():
    g = group(roles=[Role("leader"), Role("worker", replicas=3), Role("evaluator", replicas=2)])
    pods = expand(render_jobset(g, name="train-abc123"))
    envs = [env_of(p) for p in pods]
    assert [e["RANK"] for e in envs] == [str(i) for i in range(6)]
    assert [e["AE_RANK"] for e in envs] == [e["RANK"] for e in envs]
    assert [(e["AE_ROLE"], e["AE_ROLE_RANK"]) for e in envs] == [
        ("leader", "0"),
        ("worker", "0"),
        ("worker", "1"),
        ("worker", "2"),
        ("evaluator", "0"),
        ("evaluator", "1"),
    ]
    assert {e["WORLD_SIZE"] for e in envs} == {"6"}
    assert {e["AE_WORLD_SIZE"] for e in envs} == {"6"}
    assert {e["AE_ROLE_REPLICAS"] for e in envs if e["AE_ROLE"] == "worker"} == {"3"}


def test_coordinator_is_the_leaders_first_pod():
    manifest = render_jobset(group(), name="train-abc123")
    pods = expand(manifest)
    leader = pods[0]
    fqdn = f"{leader['spec']['hostname']}.{leader['spec']['subdomain']}"
    for pod in pods:
        env = env_of(pod)
        assert env["MASTER_ADDR"] == env["AE_COORDINATOR_ADDR"] == fqdn == "train-abc123-leader-0-0.train-abc123"
        assert env["MASTER_PORT"] == env["AE_COORDINATOR_PORT"] == "29500"
    assert manifest["spec"]["coordinator"] == {"replicatedJob": "leader", "jobIndex": 0, "podIndex": 0}


def test_restart_attempt_and_identity_come_from_the_pod():
    pods = expand(render_jobset(group(), name="train-x1y2z3", namespace="ml"), restart_attempt=4)
    env = env_of(pods[1])
    assert env["AE_RESTART_ATTEMPT"] == "4"
    assert env["AE_NAMESPACE"] == "ml"
    assert (env["AE_GROUP"], env["AE_JOBSET"]) == ("train", "train-x1y2z3")
    assert env["AE_METRICS_PATH"] == "/dev/termination-log"


def test_torchrun_variables_when_pods_run_several_processes():
    g = group(roles=[Role("leader", processes_per_pod=4), Role("worker", replicas=2, processes_per_pod=4)])
    envs = [env_of(p) for p in expand(render_jobset(g))]
    assert [e["NODE_RANK"] for e in envs] == ["0", "1", "2"]
    assert {(e["NNODES"], e["NPROC_PER_NODE"], e["WORLD_SIZE"]) for e in envs} == {("3", "4", "12")}
    assert all("RANK" not in e for e in envs)  # torchrun sets each process's RANK


def test_checkpoint_location_is_in_the_environment():
    env = env_of(expand(render_jobset(group(checkpoint=Checkpointing("s3://b/run", keep=5))))[0])
    assert (env["AE_CHECKPOINT_URI"], env["AE_CHECKPOINT_KEEP"]) == ("s3://b/run", "5")
    assert "AE_CHECKPOINT_URI" not in env_of(expand(render_jobset(group()))[0])


def test_user_env_follows_the_contract_and_role_env_wins():
    g = group(env={"A": "group", "B": "group"}, roles=[Role("leader", env={"B": "role"})])
    env = trainer(render_jobset(g), "leader")["env"]
    assert [v["name"] for v in env][-2:] == ["A", "B"]
    assert env_of(expand(render_jobset(g))[0])["B"] == "role"


@pytest.mark.parametrize(
    ("mode", "roles", "expected"),
    [
        ("all", (), {"operator": "All"}),
        ("any", ("worker",), {"operator": "Any", "targetReplicatedJobs": ["worker"]}),
        ("all", ("leader",), {"operator": "All", "targetReplicatedJobs": ["leader"]}),
    ],
)
def test_success_policy(mode, roles, expected):
    manifest = render_jobset(group(success=SuccessPolicy(mode=mode, roles=roles)))
    assert manifest["spec"]["successPolicy"] == expected


def test_failure_policy_separates_disruptions_from_failures():
    manifest = render_jobset(group(failure=FailurePolicy(max_failures=3, max_preemptions=7)))
    policy = manifest["spec"]["failurePolicy"]
    assert policy["maxRestarts"] == 3
    first, second = policy["rules"]
    assert first["action"] == "RestartJobSetAndIgnoreMaxRestarts"
    assert first["onJobFailureReasons"] == ["PodFailurePolicy"]
    # The Job controller's message for our FailJob rule (pkg/controller/job/pod_failure_policy.go):
    disruption = "Pod default/train-leader-0-0-abcde has condition DisruptionTarget matching FailJob rule at index 0"
    exit_code = "Container trainer for pod default/p failed with exit code 3 matching FailJob rule at index 1"
    (pattern,) = first["onJobFailureMessagePatterns"]
    assert re.search(pattern, disruption) and not re.search(pattern, exit_code)
    assert second == {"name": "CountFailure", "action": "RestartJobSet"}
    job = rjob(manifest, "worker")["template"]["spec"]
    assert job["podFailurePolicy"]["rules"] == [
        {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    ]


@pytest.mark.parametrize("platform", sorted(platforms.SPOT_PLATFORMS))
def test_spot_placement_per_platform(platform):
    capacity = platforms.SPOT_PLATFORMS[platform]
    g = group(roles=[Role("leader"), Role("worker", placement=Placement(spot=True, spot_platform=platform))])
    manifest = render_jobset(g)
    worker = pod_spec(manifest, "worker")
    assert worker["nodeSelector"] == capacity.node_selector
    assert worker["tolerations"] == [*capacity.tolerations, *NODE_LOSS]
    leader = pod_spec(manifest, "leader")  # the leader keeps the group's on-demand placement
    assert "nodeSelector" not in leader and leader["tolerations"] == NODE_LOSS


def test_known_platform_labels():
    assert platforms.SPOT_PLATFORMS["gke"].node_selector == {"cloud.google.com/gke-spot": "true"}
    assert platforms.SPOT_PLATFORMS["eks"].node_selector == {"eks.amazonaws.com/capacityType": "SPOT"}
    assert platforms.SPOT_PLATFORMS["aks"].node_selector == {"kubernetes.azure.com/scalesetpriority": "spot"}
    assert platforms.SPOT_PLATFORMS["karpenter"].node_selector == {"karpenter.sh/capacity-type": "spot"}


def test_user_selector_and_tolerations_add_to_spot():
    extra = {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
    g = group(placement=Placement(spot=True, spot_platform="aks", node_selector={"pool": "a100"}, tolerations=[extra]))
    spec = pod_spec(render_jobset(g), "leader")
    assert spec["nodeSelector"] == {"kubernetes.azure.com/scalesetpriority": "spot", "pool": "a100"}
    assert spec["tolerations"] == [*platforms.SPOT_PLATFORMS["aks"].tolerations, extra, *NODE_LOSS]


def test_gpu_resources_and_taint():
    g = group(roles=[Role("leader", resources=Resources(cpu="8", memory="32Gi", gpu=2))])
    c = trainer(render_jobset(g), "leader")
    assert c["resources"] == {
        "requests": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"},
        "limits": {"memory": "32Gi", "nvidia.com/gpu": "2"},
    }
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod_spec(
        render_jobset(g), "leader"
    )["tolerations"]


def test_other_gpu_vendor_and_extended_resources():
    res = Resources(
        cpu=4,
        gpu=1,
        gpu_vendor="amd",
        extended={"rdma/ib": 1},
        cpu_limit="6",
        memory="1Gi",
        memory_limit="2Gi",
    )
    c = trainer(render_jobset(group(roles=[Role("leader", resources=res)])), "leader")
    assert c["resources"]["requests"] == {"cpu": "4", "memory": "1Gi", "rdma/ib": "1", "amd.com/gpu": "1"}
    assert c["resources"]["limits"] == {"cpu": "6", "memory": "2Gi", "rdma/ib": "1", "amd.com/gpu": "1"}


def test_cpu_only_pods_have_no_gpu_toleration():
    spec = pod_spec(render_jobset(group(roles=[Role("leader", resources=Resources(cpu=1))])), "leader")
    assert spec["tolerations"] == NODE_LOSS


def test_every_pod_tolerates_node_loss_for_the_failure_policys_seconds():
    """Not DefaultTolerationSeconds' 300 s: a gang member on a lost node stalls the others until it is evicted."""
    spot = Placement(spot=True, spot_platform="gke")
    g = group(roles=[Role("leader"), Role("worker", replicas=2, placement=spot)])
    for seconds in (30, 0, 600):
        manifest = render_jobset(g.with_changes(failure=FailurePolicy(node_loss_toleration_seconds=seconds)))
        expected = [{**t, "tolerationSeconds": seconds} for t in NODE_LOSS]
        assert pod_spec(manifest, "leader")["tolerations"] == expected
        assert pod_spec(manifest, "worker")["tolerations"] == [*platforms.SPOT_PLATFORMS["gke"].tolerations, *expected]
        assert schema_errors(manifest) == [] and webhook_errors(manifest) == []


def test_node_loss_toleration_none_leaves_the_cluster_default():
    manifest = render_jobset(group(failure=FailurePolicy(node_loss_toleration_seconds=None)))
    assert all("tolerations" not in pod_spec(manifest, role) for role in ("leader", "worker"))


@pytest.mark.parametrize(
    "declared",
    [
        {**NODE_LOSS[0], "tolerationSeconds": 900},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},  # forever
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists"},  # every effect, NoExecute included
    ],
)
def test_a_placements_own_node_loss_toleration_wins_for_its_key(declared):
    g = group(roles=[Role("leader"), Role("worker", placement=Placement(tolerations=[declared]))])
    manifest = render_jobset(g)
    assert pod_spec(manifest, "worker")["tolerations"] == [declared, NODE_LOSS[1]]  # not-ready still ours
    assert pod_spec(manifest, "leader")["tolerations"] == NODE_LOSS  # the group's placement declared none
    assert schema_errors(manifest) == []


def test_node_loss_tolerations_the_user_did_not_make_for_no_execute_are_still_added():
    no_schedule = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}
    other = {"key": "dedicated", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}
    spec = pod_spec(render_jobset(group(placement=Placement(tolerations=[no_schedule, other]))), "leader")
    assert spec["tolerations"] == [no_schedule, other, *NODE_LOSS]


def test_a_toleration_of_every_taint_gets_no_node_loss_toleration():
    everything = {"operator": "Exists"}  # no key, no effect: tolerates every taint forever
    spec = pod_spec(render_jobset(group(placement=Placement(tolerations=[everything]))), "leader")
    assert spec["tolerations"] == [everything]


def test_queue_exclusive_topology_and_priority():
    g = group(
        placement=Placement(queue="team-a", exclusive_topology="cloud.google.com/gke-nodepool", priority_class="high"),
        roles=[
            Role("leader"),
            Role("worker", placement=Placement(exclusive_topology="kubernetes.io/hostname")),
        ],
    )
    manifest = render_jobset(g)
    assert manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    annotation = "alpha.jobset.sigs.k8s.io/exclusive-topology"
    assert manifest["metadata"]["annotations"] == {annotation: "cloud.google.com/gke-nodepool"}
    assert rjob(manifest, "worker")["template"]["metadata"]["annotations"] == {annotation: "kubernetes.io/hostname"}
    assert pod_spec(manifest, "leader")["priorityClassName"] == "high"


def test_pod_overrides_merge_group_then_role():
    g = group(
        pod_overrides={
            "metadata": {"annotations": {"team": "ml"}},
            "spec": {
                "serviceAccountName": "trainer",
                "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
                "containers": [{"name": "trainer", "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}],
                "imagePullSecrets": [{"name": "regcred"}],
            },
        },
        roles=[
            Role(
                "leader",
                pod_overrides={
                    "spec": {
                        "serviceAccountName": "leader",
                        "containers": [
                            {"name": "trainer", "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                            {"name": "metrics", "image": "prom/exporter"},
                        ],
                        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
                    }
                },
            ),
            Role("worker"),
        ],
    )
    manifest = render_jobset(g)
    leader, worker = pod_spec(manifest, "leader"), pod_spec(manifest, "worker")
    assert leader["serviceAccountName"] == "leader" and worker["serviceAccountName"] == "trainer"
    assert [v["name"] for v in leader["volumes"]] == ["dshm", "data"]
    assert [c["name"] for c in leader["containers"]] == ["trainer", "metrics"]
    assert [m["mountPath"] for m in leader["containers"][0]["volumeMounts"]] == ["/dev/shm", "/data"]
    assert leader["containers"][0]["image"] == "example/trainer:1"  # owned fields untouched
    assert [m["mountPath"] for m in worker["containers"][0]["volumeMounts"]] == ["/dev/shm"]
    pod_meta = rjob(manifest, "worker")["template"]["spec"]["template"]["metadata"]
    assert pod_meta["annotations"] == {"team": "ml"}
    assert pod_meta["labels"]["airflow-elastic.io/role"] == "worker"


def test_labels_prove_ownership():
    manifest = render_jobset(group(), labels={"airflow-elastic.io/dag-id": "nightly"})
    labels = manifest["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "airflow-elastic"
    assert labels["airflow-elastic.io/group"] == "train"
    for r in manifest["spec"]["replicatedJobs"]:
        pod_labels = r["template"]["spec"]["template"]["metadata"]["labels"]
        assert pod_labels["airflow-elastic.io/dag-id"] == "nightly"
        assert pod_labels["airflow-elastic.io/role"] == r["name"]


def test_render_does_not_change_the_group():
    g = group(pod_overrides={"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}})
    before = copy.deepcopy(g)
    manifest = render_jobset(g)
    pod_spec(manifest, "leader")["volumes"][0]["name"] = "changed"
    assert g == before
    assert render_jobset(g) == render_jobset(g)


def test_run_name_fits_the_budget_checked_at_parse_time():
    # The longest group name that validates with this role must render with any run name.
    for length in range(1, 40):
        try:
            g = group(name="g" * length, roles=[Role("leader"), Role("worker", replicas=1000)])
        except SpecError:
            break
        run = names.run_name(g.name, "dag", "task", "run", -1)
        assert len(run) == names.run_name_length(g.name)
        assert webhook_errors(render_jobset(g, name=run)) == []
    else:
        pytest.fail("no name length was rejected")
    assert length < 30  # 2*(len+7) + len("leader") + 6 <= 63 gives 21


def test_run_name_is_deterministic():
    assert names.run_name("train", "d", "t", "r", 0) == names.run_name("train", "d", "t", "r", 0)
    assert names.run_name("train", "d", "t", "r", 0) != names.run_name("train", "d", "t", "r", 1)
    assert re.fullmatch(r"train-[0-9a-z]{6}", names.run_name("train", "x"))


@pytest.mark.parametrize(
    ("kwargs", "path"),
    [
        ({"name": "Upper"}, "name"),
        ({"name": "t" * 30}, "name"),
        ({"namespace": "Bad_NS"}, "namespace"),
        ({"labels": {"ok": "not ok!"}}, "labels['ok']"),
        ({"labels": {"airflow-elastic.io/group": "x"}}, "labels['airflow-elastic.io/group']"),
        ({"ttl_seconds_after_finished": -1}, "ttl_seconds_after_finished"),
    ],
)
def test_render_arguments_are_validated(kwargs, path):
    with pytest.raises(SpecError) as info:
        render_jobset(group(), **kwargs)
    assert [p for p, _ in info.value.problems] == [path]


def test_ttl():
    assert render_jobset(group(), ttl_seconds_after_finished=600)["spec"]["ttlSecondsAfterFinished"] == 600
    assert "ttlSecondsAfterFinished" not in render_jobset(group())["spec"]


def test_schema_errors_catch_what_the_api_server_would_reject():
    manifest = render_jobset(group())
    assert schema_errors(manifest) == []
    broken = copy.deepcopy(manifest)
    del broken["spec"]["failurePolicy"]["rules"][0]["name"]
    broken["spec"]["replicatedJobs"][0]["replicas"] = "two"
    pod_spec(broken, "worker")["containers"][0]["ports"] = [{"containerPort": "http"}]
    errors = schema_errors(broken)
    assert any("failurePolicy.rules[0]" in e and "'name' is a required property" in e for e in errors)
    assert any("replicatedJobs[0].replicas" in e for e in errors)
    assert any(e.startswith("replicatedJobs[1].template.spec.template.spec.containers[0].ports[0]") for e in errors)


def test_webhook_oracle_rejects_broken_manifests():
    manifest = render_jobset(group())
    broken = copy.deepcopy(manifest)
    broken["metadata"]["name"] = "x" * 50
    broken["spec"]["failurePolicy"]["rules"][1]["name"] = "bad name"
    broken["spec"]["successPolicy"]["targetReplicatedJobs"] = ["nobody"]
    errors = webhook_errors(broken)
    assert len(errors) >= 4, errors


def test_big_group_is_valid():
    g = TrainingGroup(
        "big",
        [
            Role("driver", processes_per_pod=8),
            Role("trainer", replicas=512, resources=Resources(gpu=8), processes_per_pod=8),
        ],
        image="x",
        success=SuccessPolicy(roles=("driver",)),
    )
    manifest = render_jobset(g, name=names.run_name("big", 1))
    assert schema_errors(manifest) == [] and webhook_errors(manifest) == []
