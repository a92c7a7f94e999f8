"""Host discovery for elastic roles: which pods count, the selector, the output lines, the credentials lookup."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_elastic.runtime import discovery
from airflow_elastic.runtime.discovery import ApiAccess, DiscoveryError, ready_hosts, selector

J = "jobset.sigs.k8s.io"


def pod(name: str, index: int, *, ready: bool = True, phase: str = "Running", deleting: bool = False) -> dict:
    meta: dict[str, Any] = {"name": name, "labels": {f"{J}/job-index": str(index)}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": meta,
        "spec": {"hostname": f"js-worker-{index}-0", "subdomain": "js"},
        "status": {
            "phase": phase,
            "podIP": f"127.0.0.{index + 10}",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "token").write_text("secret\n")
    (tmp_path / "ca.crt").write_text("")
    return {
        "AE_JOBSET": "js",
        "AE_NAMESPACE": "ml",
        "AE_ROLE": "leader",
        "AE_ELASTIC_ROLE": "worker",
        "AE_RESTART_ATTEMPT": "2",
        "AE_PROCESSES_PER_POD": "4",
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
        discovery.LOCAL_SERVICEACCOUNT_ENV: str(tmp_path),
    }


def test_only_ready_running_pods_that_are_not_terminating_count(env, monkeypatch):
    listing = {
        "items": [
            pod("c", 2),
            pod("a", 0),
            pod("b", 1, deleting=True),  # being evicted: gone for the framework already
            pod("d", 3, ready=False),
            pod("e", 4, phase="Pending"),
        ]
    }
    calls = []

    def get(self: ApiAccess, path: str, query: dict[str, str], timeout: float) -> dict:
        calls.append((self.url, path, query))
        return listing

    monkeypatch.setattr(ApiAccess, "get", get)
    hosts = ready_hosts(env)
    assert [h.line() for h in hosts] == ["127.0.0.10:4", "127.0.0.12:4"]
    assert [h.line("fqdn") for h in hosts] == ["js-worker-0-0.js:4", "js-worker-2-0.js:4"]
    selector_ = f"{J}/jobset-name=js,{J}/replicatedjob-name=worker,{J}/restart-attempt=2"
    assert calls == [("https://10.0.0.1:443", "/api/v1/namespaces/ml/pods", {"labelSelector": selector_})]


def test_selector_role_falls_back_to_the_pods_own_role(env):
    del env["AE_ELASTIC_ROLE"], env["AE_RESTART_ATTEMPT"]
    assert selector(env) == f"{J}/jobset-name=js,{J}/replicatedjob-name=leader"
    assert selector(env, "worker") == f"{J}/jobset-name=js,{J}/replicatedjob-name=worker"


def test_credentials_come_from_the_standard_variables_and_directory(env, tmp_path):
    access = ApiAccess.from_env(env)
    assert (access.url, access.token_file, access.ca_file) == (
        "https://10.0.0.1:443",
        tmp_path / "token",
        tmp_path / "ca.crt",
    )
    assert ApiAccess.from_env({**env, "KUBERNETES_SERVICE_HOST": "fd00::1"}).url == "https://[fd00::1]:443"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"KUBERNETES_SERVICE_HOST": ""}, "not in a cluster"),
        ({discovery.LOCAL_SERVICEACCOUNT_ENV: "/nonexistent"}, "automountServiceAccountToken"),
        ({"AE_NAMESPACE": ""}, "not in a training group"),
        ({"AE_JOBSET": ""}, "AE_JOBSET"),
    ],
)
def test_missing_pieces_are_named(env, change, message):
    with pytest.raises(DiscoveryError, match=message):
        ready_hosts({**env, **change})


def test_the_script_prints_lines_or_fails_with_a_message(env, monkeypatch, capsys):
    monkeypatch.setattr(ApiAccess, "get", lambda *a: {"items": [pod("a", 0), pod("b", 1)]})
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert discovery.main([]) == 0
    assert capsys.readouterr().out == "127.0.0.10:4\n127.0.0.11:4\n"
    monkeypatch.delenv("AE_NAMESPACE")
    assert discovery.main([]) == 1
    assert "host discovery failed" in capsys.readouterr().err
