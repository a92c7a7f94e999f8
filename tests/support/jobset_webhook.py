"""An independent re-implementation of what the JobSet API server and webhook enforce beyond the CRD schema
(``docs/jobset.md`` §4), plus "valid without webhook help" (§10). Written from the notes, not from our renderer, so a
misunderstanding in the renderer does not hide itself here.
"""

from __future__ import annotations

import re
from typing import Any

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
FAILURE_REASONS = {
    "BackoffLimitExceeded",
    "DeadlineExceeded",
    "FailedIndexes",
    "MaxFailedIndexesExceeded",
    "PodFailurePolicy",
}
GATED_ACTIONS = {"RestartJob", "RestartJobAndIgnoreMaxRestarts"}


def _dns1035(value: str) -> bool:
    return len(value) <= 63 and bool(DNS1035.match(value))


def webhook_errors(js: dict[str, Any], *, restart_job_gate: bool = False) -> list[str]:
    """Errors the JobSet webhook / CEL rules would return for ``js`` (created as is, without defaulting), on a
    JobSet with its ``RestartJob`` feature gate on or off."""
    errors: list[str] = []
    name = js["metadata"]["name"]
    spec = js["spec"]
    rjobs = spec["replicatedJobs"]
    rjob_names = [r["name"] for r in rjobs]
    if len(set(rjob_names)) != len(rjob_names):
        errors.append("replicatedJobs names must be unique")

    for r in rjobs:
        replicas = r.get("replicas", 1)
        job = f"{name}-{r['name']}-{replicas - 1}"
        if not _dns1035(job):
            errors.append(f"job name {job!r} is not a DNS-1035 label <= 63")
        job_spec = r["template"]["spec"]
        if job_spec.get("completionMode") == "Indexed" and "completions" in job_spec:
            pod = f"{job}-{job_spec['completions'] - 1}-abcde"
            if not _dns1035(pod):
                errors.append(f"pod name {pod!r} is not a DNS-1035 label <= 63")
        # Without the mutating webhook there is no restartPolicy default; with a podFailurePolicy it must be Never.
        restart = job_spec["template"]["spec"].get("restartPolicy")
        if restart is None:
            errors.append(f"{r['name']}: pod restartPolicy must be explicit")
        elif "podFailurePolicy" in job_spec and restart != "Never":
            errors.append(f"{r['name']}: podFailurePolicy requires restartPolicy Never")
        for dep in r.get("dependsOn", []):
            if dep["name"] not in rjob_names[: rjob_names.index(r["name"])]:
                errors.append(f"{r['name']}: dependsOn must name an earlier replicated job")

    subdomain = spec.get("network", {}).get("subdomain", name)
    if not (DNS1123_SUBDOMAIN.match(subdomain) and _dns1035(subdomain)):
        errors.append(f"subdomain {subdomain!r} invalid")

    coord = spec.get("coordinator")
    if coord:
        matching = [r for r in rjobs if r["name"] == coord["replicatedJob"]]
        if not matching:
            errors.append("coordinator replicatedJob does not exist")
        else:
            r = matching[0]
            job_spec = r["template"]["spec"]
            if job_spec.get("completionMode") != "Indexed" or "completions" not in job_spec:
                errors.append("coordinator replicatedJob must be Indexed with completions set")
            if not 0 <= coord.get("jobIndex", 0) < r.get("replicas", 1):
                errors.append("coordinator jobIndex out of range")
            if not 0 <= coord.get("podIndex", 0) < job_spec.get("completions", 1):
                errors.append("coordinator podIndex out of range")
            endpoint = f"{name}-{r['name']}-{coord.get('jobIndex', 0)}-{coord.get('podIndex', 0)}.{subdomain}"
            if len(endpoint) > 63 or not LABEL_VALUE.match(endpoint):
                errors.append(f"coordinator endpoint {endpoint!r} is not a valid label value")

    for target in spec.get("successPolicy", {}).get("targetReplicatedJobs", []):
        if target not in rjob_names:
            errors.append(f"successPolicy target {target!r} does not exist")

    policy = spec.get("failurePolicy", {})
    if policy.get("restartStrategy") == "InPlaceRestart":
        errors.append("InPlaceRestart needs a feature gate")
    rule_names = []
    for rule in policy.get("rules", []):
        rule_names.append(rule.get("name"))
        if not rule.get("name") or not RULE_NAME.match(rule["name"]) or len(rule["name"]) > 128:
            errors.append(f"rule name {rule.get('name')!r} invalid or missing")
        if rule["action"] in GATED_ACTIONS and not restart_job_gate:
            errors.append(f"action {rule['action']} needs the RestartJob feature gate")
        for reason in rule.get("onJobFailureReasons", []):
            if reason not in FAILURE_REASONS:
                errors.append(f"unknown job failure reason {reason!r}")
        for target in rule.get("targetReplicatedJobs", []):
            if target not in rjob_names:
                errors.append(f"rule target {target!r} does not exist")
        for pattern in rule.get("onJobFailureMessagePatterns", []):
            try:
                re.compile(pattern)
            except re.error:
                errors.append(f"pattern {pattern!r} does not compile")
    if len(set(rule_names)) != len(rule_names):
        errors.append("failure policy rule names must be unique")

    if spec.get("startupPolicy", {}).get("startupPolicyOrder") == "InOrder" and any("dependsOn" in r for r in rjobs):
        errors.append("StartupPolicy and DependsOn APIs are mutually exclusive")
    return errors
