from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.cluster import CONN_ID, Kubectl
from tests.support.paths import ROOT
from tests.support.waiting import wait_for

#: Fixtures kept beside the helpers they use.
pytest_plugins = ("tests.support.airflow_fixtures", "tests.support.cpu_report")

if TYPE_CHECKING:
    from airflow_elastic.localcluster import LocalCluster


#: Tests that need the machine to themselves, and why. ``make test`` runs the rest on two pytest-xdist workers
#: (``-m "not serial"``), then these alone (``-m serial``); they are marked here, by file, so the list is one place.
SERIAL = {
    # A real scheduler and triggerer whose heartbeat timeouts are a few seconds: a starved worker would be a zombie.
    "tests/deployment/test_real_processes.py": "real Airflow components with second-scale heartbeat timeouts",
    # The whole nightly pipeline twice under real Airflow components: minutes of CPU, and the defer race it guards
    # against depends on timing.
    "tests/deployment/test_nightly_deployment.py": "real Airflow components running the flagship DAG twice",
}
#: Under pytest-xdist (``--dist loadfile --no-loadscope-reorder``) these long files are handed out first, so no
#: worker starts one of them while the other has nothing left to do.
FIRST = (
    "tests/examples/test_demo.py",
    "tests/examples/test_goodput_bench.py",
    "tests/examples/test_fault_tolerant_example.py",
    "tests/examples/test_ray_sweep_example.py",
    "tests/operators/test_retry_adoption.py",
    "tests/package/test_packaging.py",
)


#: The tiers, cheapest first (``pytest -m unit`` ...): what a test needs, decided from what it uses (a module may
#: also say ``pytestmark = pytest.mark.<tier>`` when it starts the expensive thing some other way, e.g. a tool).
TIERS = ("unit", "cluster", "airflow")
#: A test using one of these fixtures, or whose module holds one of these names (imported or defined), is in that tier.
AIRFLOW_FIXTURES = frozenset({"migrated_airflow_db"})
AIRFLOW_NAMES = frozenset({"dags_test", "AirflowDeployment", "migrate_db"})
CLUSTER_FIXTURES = frozenset({"local_cluster"})
CLUSTER_NAMES = frozenset({"LocalCluster"})


def tier(item: pytest.Item) -> str:
    """``unit`` (no process of its own beyond a quick subprocess), ``cluster`` (a local cluster: the session's or its
    own), ``airflow`` (Airflow itself: ``airflow dags test`` or Airflow's components, on a local cluster)."""
    declared = [mark.name for mark in item.iter_markers() if mark.name in TIERS]
    if declared:
        return max(declared, key=TIERS.index)
    names = set(vars(getattr(item, "module", None) or object()))
    fixtures = set(getattr(item, "fixturenames", ()))
    if fixtures & AIRFLOW_FIXTURES or names & AIRFLOW_NAMES:
        return "airflow"
    if fixtures & CLUSTER_FIXTURES or names & CLUSTER_NAMES:
        return "cluster"
    return "unit"


@pytest.hookimpl(tryfirst=True)  # before -m selects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(tier(item))
        if item.path.relative_to(ROOT).as_posix() in SERIAL:
            item.add_marker(pytest.mark.serial)
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker collects alike, so the order is the same in each
        items.sort(key=lambda item: item.path.relative_to(ROOT).as_posix() not in FIRST)  # stable: else as collected


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Under pytest-xdist a serial test fails at once, saying so, rather than run starved beside others."""
    if item.get_closest_marker("serial") and os.environ.get("PYTEST_XDIST_WORKER"):
        path = item.path.relative_to(ROOT).as_posix()
        pytest.fail(
            f"{path} must not run beside other tests ({SERIAL.get(path, 'marked serial')}): "
            'run it without -n, or deselect it with -m "not serial" (as `make test` does)',
            pytrace=False,
        )


@pytest.fixture
def root() -> Path:
    return ROOT


# ------------------------------------------------------------------ the session's local cluster and its clients


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One local cluster per test session (per pytest-xdist worker), its own process; tests share it through a fresh
    :func:`namespace` each."""
    from airflow_elastic.localcluster import LocalCluster

    with LocalCluster(tmp_path_factory.mktemp("local-cluster")) as cluster:
        if cluster.process is not None:  # what --cpu-report charges the tests for their pods
            from tests.support import cpu_report

            cpu_report.SESSION_CLUSTER_PID[:] = [cluster.process.pid]
        SESSION_CLUSTER[:] = [cluster]
        yield cluster


#: The session's local cluster once a test has started it (for :func:`session_nodes_restored`).
SESSION_CLUSTER: list[LocalCluster] = []


@pytest.fixture(scope="module", autouse=True)
def session_nodes_restored(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test file, the session cluster has its default nodes again, ready and schedulable: a file that
    reclaims a node without a replacement (``replace_after``) fails here, not some later file whose pods then share
    the one node left."""
    yield
    if not SESSION_CLUSTER:
        return
    from kubernetes import client, config

    from airflow_elastic.localcluster.config import DEFAULT_POOLS

    # A client of its own: the session's ``core`` may never have been made (a file with a cluster of its own).
    api = config.new_client_from_config(config_file=str(SESSION_CLUSTER[0].kubeconfig))
    core = client.CoreV1Api(api)

    def short() -> dict[str, int]:
        usable: dict[str, int] = {}
        for node in core.list_node().items:
            pool = next((p for p in DEFAULT_POOLS if node.metadata.name.startswith(f"{p.name}-")), None)
            ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
            extra = {t.key for t in node.spec.taints or []} - {t["key"] for t in pool.taints} if pool else set()
            if pool and ready and not node.spec.unschedulable and not extra:
                usable[pool.name] = usable.get(pool.name, 0) + 1
        return {p.name: usable.get(p.name, 0) for p in DEFAULT_POOLS if usable.get(p.name, 0) < p.count}

    try:  # a reclaim may still be replacing its node: give it a minute
        wait_for(
            lambda: not short(),
            60,
            what=lambda: (
                f"the session cluster's pools refilled (usable nodes, where short: {short()}); "
                "did a reclaim not say replace_after?"
            ),
        )
    finally:
        api.close()


@pytest.fixture
def clock(local_cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The session cluster, its controller clock back at the real time after the test."""
    yield local_cluster
    local_cluster.reset_clock()


@pytest.fixture(scope="session")
def api_client(local_cluster: LocalCluster):  # -> kubernetes.client.ApiClient
    from kubernetes import config

    api = config.new_client_from_config(config_file=str(local_cluster.kubeconfig))
    yield api
    api.close()


@pytest.fixture(scope="session")
def core(api_client):  # -> kubernetes.client.CoreV1Api
    from kubernetes import client

    return client.CoreV1Api(api_client)


@pytest.fixture(scope="session")
def custom(api_client):  # -> kubernetes.client.CustomObjectsApi
    from kubernetes import client

    return client.CustomObjectsApi(api_client)


@pytest.fixture
def namespace(core) -> Iterator[str]:
    """A fresh namespace, deleted (asynchronously, as on a real cluster) after the test."""
    name = f"test-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="session")
def kubectl(local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    return Kubectl(local_cluster, tmp_path_factory.mktemp("kubectl-home"))


@pytest.fixture
def connection(local_cluster: LocalCluster, namespace: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A ``kubernetes`` connection to the local cluster whose default namespace is the test's (no metadata DB:
    ``AIRFLOW_CONN_<ID>``)."""
    extra = {"kube_config_path": str(local_cluster.kubeconfig), "namespace": namespace}
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps({"conn_type": "kubernetes", "extra": extra}))
    return CONN_ID


@pytest.fixture
def hook(connection: str):  # -> airflow_elastic.hooks.JobSetHook
    from airflow_elastic.hooks.jobset import JobSetHook

    hook = JobSetHook(connection)
    yield hook
    hook.close()
