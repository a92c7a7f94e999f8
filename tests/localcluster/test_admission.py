"""Admission of JobSets, Jobs and Pods: defaults, schema + CEL errors, webhook messages, immutability."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from airflow_elastic.localcluster import admission, errors
from airflow_elastic.localcluster.components import bootstrap
from airflow_elastic.localcluster.resources import JOBS, JOBSETS, PODS
from airflow_elastic.localcluster.store import Store
from tests.support.inprocess import container, job_body


@pytest.fixture
def store() -> Store:
    store = Store()
    bootstrap(store)
    admission.register(store)
    return store


def jobset(name: str = "js", **spec: Any) -> dict[str, Any]:
    rjobs = spec.pop("replicatedJobs", None) or [
        {
            "name": "workers",
            "replicas": 2,
            "template": {
                "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {"containers": [container()]}}}
            },
        }
    ]
    return {"metadata": {"name": name}, "spec": {"replicatedJobs": rjobs, **spec}}


def rejected(store: Store, body: dict[str, Any], res: Any = JOBSETS) -> errors.Invalid:
    with pytest.raises(errors.Invalid) as info:
        store.create(res, "default", body)
    assert info.value.code == 422
    return info.value


def test_jobset_defaults(store: Store) -> None:
    created = store.create(JOBSETS, "default", jobset(failurePolicy={"rules": [{"action": "FailJobSet"}]}))
    spec = created["spec"]
    assert spec["successPolicy"] == {"operator": "All"}
    assert spec["startupPolicy"] == {"startupPolicyOrder": "AnyOrder"}
    assert spec["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    assert spec["failurePolicy"]["rules"][0]["name"] == "failurePolicyRule0"
    assert spec["failurePolicy"]["restartStrategy"] == "Recreate"
    rjob = spec["replicatedJobs"][0]
    assert rjob["groupName"] == "default"
    assert rjob["template"]["spec"]["completionMode"] == "Indexed"
    assert rjob["template"]["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"


def test_jobset_schema_errors_are_field_causes(store: Store) -> None:
    body = jobset(failurePolicy={"rules": [{"name": "r", "action": "Explode"}]})
    body["spec"]["replicatedJobs"][0]["replicas"] = -1
    body["spec"]["replicatedJobs"].append({"template": {"spec": {}}})
    err = rejected(store, body)
    causes = {c["field"]: c["message"] for c in err.details["causes"]}
    assert causes["spec.replicatedJobs[0].replicas"] == (
        "Invalid value: -1: spec.replicatedJobs[0].replicas in body should be greater than or equal to 0"
    )
    assert causes["spec.replicatedJobs[1].name"] == "Required value"
    assert causes["spec.failurePolicy.rules[0].action"].startswith('Unsupported value: "Explode": supported values: ')
    assert err.message.startswith('JobSet.jobset.x-k8s.io "js" is invalid: ')


def test_jobset_cel_rules(store: Store) -> None:
    second = {
        "name": "b",
        "dependsOn": [{"name": "workers", "status": "Ready"}],
        "template": {"spec": {"template": {"spec": {"containers": [container()]}}}},
    }
    body = jobset(startupPolicy={"startupPolicyOrder": "InOrder"})
    body["spec"]["replicatedJobs"].append(second)
    err = rejected(store, body)
    assert err.details["causes"] == [
        errors.cause("spec", 'Invalid value: "object": StartupPolicy and DependsOn APIs are mutually exclusive')
    ]

    created = store.create(JOBSETS, "default", jobset())
    changed = copy.deepcopy(created)
    changed["spec"]["successPolicy"] = {"operator": "Any"}
    with pytest.raises(errors.Invalid) as info:
        store.update(JOBSETS, changed)
    assert info.value.details["causes"][0]["field"] == "spec.successPolicy"
    assert info.value.details["causes"][0]["message"].endswith("Value is immutable")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"name": "x" * 55}, "JobSet name is too long, job names generated for this JobSet will exceed 63 characters"),
        ({"name": "x" * 47}, "JobSet name is too long, pod names generated for this JobSet will exceed 63 characters"),
        (
            {"successPolicy": {"operator": "All", "targetReplicatedJobs": ["nope"]}},
            "invalid replicatedJob name 'nope' does not appear in .spec.ReplicatedJobs",
        ),
        (
            {"failurePolicy": {"rules": [{"name": "r", "action": "FailJobSet", "onJobFailureReasons": ["OOMKilled"]}]}},
            "invalid job failure reason 'OOMKilled' in failure policy is not a recognized job failure reason",
        ),
        (
            {"failurePolicy": {"rules": [{"name": "1bad", "action": "FailJobSet"}]}},
            "invalid failure policy rule name '1bad', a failure policy rule name must start with an alphabetic "
            "character, optionally followed by a string of alphanumeric characters or '_,:', and must end with an "
            "alphanumeric character or '_'",
        ),
        (
            {"failurePolicy": {"rules": [{"name": "r", "action": "RestartJob"}]}},
            "RestartJob and RestartJobAndIgnoreMaxRestarts failure policy actions are not allowed when RestartJob "
            "feature gate is disabled",
        ),
        (
            {"failurePolicy": {"restartStrategy": "InPlaceRestart"}},
            "InPlaceRestart restart strategy cannot be set when InPlaceRestart feature gate is disabled",
        ),
        (
            {"coordinator": {"replicatedJob": "workers", "jobIndex": 2}},
            "coordinator job index 2 is invalid for replicatedJob workers",
        ),
        (
            {"coordinator": {"replicatedJob": "workers", "podIndex": 5}},
            "coordinator pod index 5 is invalid for replicatedJob workers job index 0",
        ),
        ({"network": {"subdomain": "s" * 64}}, ".spec.network.subdomain is too long, must be less than 63 characters"),
    ],
)
def test_jobset_webhook_messages(store: Store, spec: dict[str, Any], message: str) -> None:
    name = spec.pop("name", "js")
    err = rejected(store, jobset(name, **spec))
    assert any(c["message"].endswith(message) for c in err.details["causes"])
    assert err.message.startswith(
        f'admission webhook "vjobset.kb.io" denied the request: JobSet.jobset.x-k8s.io "{name}"'
    )


def test_jobset_webhook_denial_is_apierrors_new_invalid(store: Store) -> None:
    """JobSet 0.12's ``invalidError``: field errors where upstream has a path, ``<nil>: Internal error`` for its
    plain errors, aggregated as ``[a, b]``; a message pattern that is no valid regex is not checked."""
    name = "x" * 55
    patterns = {"name": "r", "action": "FailJobSet", "onJobFailureMessagePatterns": ["(unclosed"]}
    body = jobset(name, successPolicy={"operator": "All", "targetReplicatedJobs": ["nope"]})
    body["spec"]["failurePolicy"] = {"rules": [patterns]}
    err = rejected(store, body)
    job = f"{name}-workers-1"
    assert err.message == (
        f'admission webhook "vjobset.kb.io" denied the request: JobSet.jobset.x-k8s.io "{name}" is invalid: ['
        f'spec.replicatedJobs[0].name: Invalid value: "{job}": JobSet name is too long, job names generated for this '
        "JobSet will exceed 63 characters, "
        f'spec.replicatedJobs[0].name: Invalid value: "{job}": JobSet name is too long, pod names generated for this '
        "JobSet will exceed 63 characters, "
        "<nil>: Internal error: invalid replicatedJob name 'nope' does not appear in .spec.ReplicatedJobs]"
    )
    assert [(c["reason"], c["field"]) for c in err.details["causes"]] == [
        ("FieldValueInvalid", "spec.replicatedJobs[0].name"),
        ("FieldValueInvalid", "spec.replicatedJobs[0].name"),
        ("InternalError", "<nil>"),
    ]


def test_jobset_depends_on_order(store: Store) -> None:
    body = jobset()
    body["spec"]["replicatedJobs"][0]["dependsOn"] = [{"name": "later", "status": "Complete"}]
    messages = [c["message"] for c in rejected(store, body).details["causes"]]
    assert messages == [
        "Internal error: DependsOn can't be set for the first ReplicatedJob",
        "Internal error: replicatedJob: workers cannot depend on replicatedJob: later",
    ]


def test_jobset_update_rules(store: Store) -> None:
    created = store.create(JOBSETS, "default", jobset(suspend=True))
    pod_spec = lambda js: js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]  # noqa: E731
    kueue = copy.deepcopy(created)
    pod_spec(kueue)["nodeSelector"] = {"pool": "a"}
    updated = store.update(JOBSETS, kueue)  # allowed while suspended
    running = copy.deepcopy(updated)
    running["spec"]["suspend"] = False
    running = store.update(JOBSETS, running)
    pod_spec(running)["nodeSelector"] = {"pool": "b"}
    with pytest.raises(errors.Invalid) as info:
        store.update(JOBSETS, running)
    assert info.value.details["causes"][0]["field"] == "spec.replicatedJobs"
    assert info.value.details["causes"][0]["message"].endswith("field is immutable")


def test_job_defaults_selector_and_labels(store: Store) -> None:
    job = store.create(JOBS, "default", job_body("j"))
    uid, spec = job["metadata"]["uid"], job["spec"]
    assert (spec["parallelism"], spec["completions"], spec["backoffLimit"]) == (1, 1, 6)
    assert (spec["completionMode"], spec["suspend"], spec["podReplacementPolicy"]) == (
        "NonIndexed",
        False,
        "TerminatingOrFailed",
    )
    assert spec["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    labels = spec["template"]["metadata"]["labels"]
    assert labels == {
        "controller-uid": uid,
        "batch.kubernetes.io/controller-uid": uid,
        "job-name": "j",
        "batch.kubernetes.io/job-name": "j",
    }


def test_job_validation(store: Store) -> None:
    causes = rejected(store, job_body("a", restartPolicy="Always"), JOBS).details["causes"]
    assert causes == [  # "Always" is what an empty policy defaults to: upstream asks for a value
        errors.cause(
            "spec.template.spec.restartPolicy",
            'Required value: valid values: "OnFailure", "Never"',
            "FieldValueRequired",
        )
    ]
    policy = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [1]}}]}
    causes = rejected(store, job_body("b", restartPolicy="OnFailure", podFailurePolicy=policy), JOBS).details["causes"]
    assert any('only "Never" is supported when podFailurePolicy is specified' in c["message"] for c in causes)
    causes = rejected(store, job_body("c", completionMode="Indexed", completions=None, parallelism=2), JOBS).details[
        "causes"
    ]
    assert causes[0]["field"] == "spec.completions"


def never(name: str, **spec: Any) -> dict[str, Any]:
    return job_body(name, restartPolicy="Never", **spec)


def test_pod_failure_policy_rules_as_upstream(store: Store) -> None:
    """``validatePodFailurePolicyRule``: an empty ``onPodConditions`` list counts as absent."""
    exit_codes = {"operator": "In", "values": [1, 42]}
    accepted = {"rules": [{"action": "FailJob", "onExitCodes": exit_codes, "onPodConditions": []}]}
    assert store.create(JOBS, "default", never("empty-conditions", podFailurePolicy=accepted))
    neither = {"rules": [{"action": "Ignore", "onPodConditions": []}]}
    causes = rejected(store, never("neither", podFailurePolicy=neither), JOBS).details["causes"]
    assert causes == [
        errors.cause(
            "spec.podFailurePolicy.rules[0]",
            "Invalid value: specifying one of OnExitCodes and OnPodConditions is required",
        )
    ]
    both = {"rules": [{"action": "Ignore", "onExitCodes": exit_codes, "onPodConditions": [{"type": "Ready"}]}]}
    causes = rejected(store, never("both", podFailurePolicy=both), JOBS).details["causes"]
    assert [c["message"] for c in causes] == [
        "Invalid value: specifying both OnExitCodes and OnPodConditions is not supported"
    ]
    codes = {"operator": "In", "values": [0, 3, 3, 2], "containerName": "sidecar"}
    causes = rejected(
        store, never("codes", podFailurePolicy={"rules": [{"action": "Count", "onExitCodes": codes}]}), JOBS
    )
    assert [(c["field"], c["message"]) for c in causes.details["causes"]] == [
        (
            "spec.podFailurePolicy.rules[0].onExitCodes.containerName",
            'Invalid value: "sidecar": must be one of the container or initContainer names in the pod template',
        ),
        ("spec.podFailurePolicy.rules[0].onExitCodes.values[0]", "Invalid value: 0: must not be 0 for the In operator"),
        ("spec.podFailurePolicy.rules[0].onExitCodes.values[2]", "Duplicate value: 3"),
        ("spec.podFailurePolicy.rules[0].onExitCodes.values", 'Invalid value: "[0, 3, 3, 2]": must be ordered'),
    ]


def test_job_spec_rules_as_upstream(store: Store) -> None:
    """``validateJobSpec``/``ValidateJob`` rules beyond the policies."""
    assert store.create(JOBS, "default", job_body("no-deadline", activeDeadlineSeconds=0))
    long = "j" * 62
    causes = rejected(store, job_body(long, completionMode="Indexed", completions=10, parallelism=1), JOBS)
    assert causes.details["causes"] == [
        errors.cause(
            "metadata.name", f'Invalid value: "{long}": will not able to create pod with invalid DNS label: {long}-9'
        )
    ]
    causes = rejected(store, job_body("per-index", backoffLimitPerIndex=1, maxFailedIndexes=1), JOBS).details["causes"]
    assert [(c["field"], c["message"]) for c in causes] == [
        ("spec.backoffLimitPerIndex", "Invalid value: 1: requires indexed completion mode"),
        ("spec.maxFailedIndexes", "Invalid value: 1: requires indexed completion mode"),
    ]
    policy = {"rules": [{"succeededIndexes": "0-2", "succeededCount": 4}, {"succeededIndexes": "3,1"}]}
    body = job_body("success", completionMode="Indexed", completions=4, parallelism=4, successPolicy=policy)
    assert [(c["field"], c["message"]) for c in rejected(store, body, JOBS).details["causes"]] == [
        (
            "spec.successPolicy.rules[0].succeededCount",
            "Invalid value: 4: must be less than or equal to 3 (the number of indexes in the specified "
            "succeededIndexes field)",
        ),
        (
            "spec.successPolicy.rules[1].succeededIndexes",
            'Invalid value: "3,1": error parsing succeededIndexes: non-increasing order, previous: 3, current: 1',
        ),
    ]


def test_job_template_and_completion_mode_are_immutable(store: Store) -> None:
    job = store.create(JOBS, "default", job_body("j"))
    changed = copy.deepcopy(job)
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "other"
    changed["spec"]["completionMode"] = "Indexed"
    with pytest.raises(errors.Invalid) as info:
        store.update(JOBS, changed)
    fields = {c["field"] for c in info.value.details["causes"]}
    assert {"spec.template", "spec.completionMode"} <= fields
    resized = copy.deepcopy(job)
    resized["spec"]["parallelism"] = 3  # parallelism may change
    assert store.update(JOBS, resized)["spec"]["parallelism"] == 3


def test_job_update_rules_as_upstream(store: Store) -> None:
    """``ValidateJobSpecUpdate``: podReplacementPolicy may change; an Indexed Job's completions only with
    parallelism."""
    job = store.create(JOBS, "default", job_body("j", completionMode="Indexed", completions=2, parallelism=2))
    changed = copy.deepcopy(job)
    changed["spec"]["podReplacementPolicy"] = "Failed"
    job = store.update(JOBS, changed)
    assert job["spec"]["podReplacementPolicy"] == "Failed"
    resized = copy.deepcopy(job)
    resized["spec"]["completions"] = 3
    with pytest.raises(errors.Invalid) as info:
        store.update(JOBS, resized)
    assert info.value.details["causes"] == [
        errors.cause("spec.completions", "Invalid value: 3: can only be modified in tandem with spec.parallelism")
    ]
    resized["spec"]["parallelism"] = 3
    assert store.update(JOBS, resized)["spec"]["completions"] == 3


def test_pod_validation_and_update_rules(store: Store) -> None:
    bad = {"metadata": {"name": "p"}, "spec": {"restartPolicy": "Sometimes", "containers": [{"name": "Main"}]}}
    fields = {c["field"] for c in rejected(store, bad, PODS).details["causes"]}
    assert fields == {"spec.containers[0].name", "spec.containers[0].image", "spec.restartPolicy"}
    assert rejected(store, {"metadata": {"name": "q"}, "spec": {}}, PODS).details["causes"][0]["field"] == (
        "spec.containers"
    )
    pod = store.create(PODS, "default", {"metadata": {"name": "ok"}, "spec": {"containers": [container()]}})
    assert (pod["spec"]["restartPolicy"], pod["spec"]["terminationGracePeriodSeconds"]) == ("Always", 30)
    changed = copy.deepcopy(pod)
    changed["spec"]["containers"][0]["command"] = ["other"]
    with pytest.raises(errors.Invalid) as info:
        store.update(PODS, changed)
    assert info.value.details["causes"][0]["message"].startswith("Forbidden: pod updates may not change fields")
    image = copy.deepcopy(pod)
    image["spec"]["containers"][0]["image"] = "busybox:1.37"
    assert store.update(PODS, image)["spec"]["containers"][0]["image"] == "busybox:1.37"


def test_probe_and_port_defaults_as_upstream(store: Store) -> None:
    """``SetDefaults_Probe``, ``SetDefaults_HTTPGetAction`` and ``SetDefaults_ContainerPort`` (kubernetes
    ``pkg/apis/core/v1/defaults.go``): a field left 0 or unset gets its default, one set is kept."""
    probed = container()
    probed["readinessProbe"] = {"httpGet": {"port": 8080}, "periodSeconds": 2}
    probed["livenessProbe"] = {"exec": {"command": ["true"]}, "failureThreshold": 0}
    probed["ports"] = [{"containerPort": 8080}, {"containerPort": 9000, "protocol": "UDP"}]
    pod = store.create(PODS, "default", {"metadata": {"name": "probed"}, "spec": {"containers": [probed]}})
    spec = pod["spec"]["containers"][0]
    assert spec["readinessProbe"] == {
        "httpGet": {"port": 8080, "path": "/", "scheme": "HTTP"},
        "periodSeconds": 2,
        "timeoutSeconds": 1,
        "successThreshold": 1,
        "failureThreshold": 3,
    }
    assert spec["livenessProbe"]["failureThreshold"] == 3 and spec["livenessProbe"]["periodSeconds"] == 10
    assert "startupProbe" not in spec
    assert [p["protocol"] for p in spec["ports"]] == ["TCP", "UDP"]
