"""torchrun's rendezvous port is moved per rendezvous on the one host (``localcluster.storeport``, pure)."""

from __future__ import annotations

from airflow_elastic.localcluster.storeport import PORTS, with_store_port

TRAINER = {"PET_MASTER_ADDR": "tj-node-0-0.tj", "PET_MASTER_PORT": "29500", "PET_NODE_RANK": "1"}


def test_every_pod_of_a_rendezvous_gets_the_same_port_of_its_own():
    node0 = with_store_port({**TRAINER, "PET_NODE_RANK": "0"}, cluster="/state", namespace="ml")
    node1 = with_store_port(TRAINER, cluster="/state", namespace="ml")
    port = node0["PET_MASTER_PORT"]
    assert node1["PET_MASTER_PORT"] == port != "29500" and int(port) in PORTS
    others = [
        with_store_port({**TRAINER, "PET_MASTER_ADDR": "other-node-0-0.other"}, cluster="/state", namespace="ml"),
        with_store_port(TRAINER, cluster="/state", namespace="team-b"),
        with_store_port(TRAINER, cluster="/another-cluster", namespace="ml"),
    ]
    assert all(env["PET_MASTER_PORT"] != port for env in others)


def test_the_pods_other_names_for_that_port_follow_and_the_rest_is_untouched():
    operator_env = {
        **TRAINER,
        "MASTER_PORT": "29500",
        "AE_COORDINATOR_PORT": "29500",
        "METRICS_PORT": "9090",
        "NOTE": "29500",
    }
    moved = with_store_port(operator_env, cluster="/state", namespace="ml")
    port = moved["PET_MASTER_PORT"]
    assert moved["MASTER_PORT"] == moved["AE_COORDINATOR_PORT"] == port
    assert (moved["METRICS_PORT"], moved["NOTE"], moved["PET_MASTER_ADDR"]) == ("9090", "29500", "tj-node-0-0.tj")


def test_a_pod_without_a_torchrun_rendezvous_is_left_alone():
    jobset_pod = {"MASTER_ADDR": "g-leader-0-0.g", "MASTER_PORT": "29500"}
    assert with_store_port(jobset_pod, cluster="/state", namespace="ml") == jobset_pod
    assert (
        with_store_port({"PET_MASTER_ADDR": "x", "PET_MASTER_PORT": "$(P)"}, cluster="c", namespace="n")[
            "PET_MASTER_PORT"
        ]
        == "$(P)"
    )
