"""A group's rendezvous port is moved per rendezvous on the one host (``localcluster.storeport``, pure)."""

from __future__ import annotations

from airflow_elastic.localcluster.storeport import PORTS, store_port, with_store_port

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


def test_a_jobset_groups_coordinator_port_is_moved_alike_in_all_its_pods():
    """A JobSet group's contract: torch's ``env://`` store (rank 0) binds ``MASTER_PORT`` on every interface too."""
    leader = {"MASTER_ADDR": "g-leader-0-0.g", "MASTER_PORT": "29500", "AE_COORDINATOR_PORT": "29500", "RANK": "0"}
    worker = {**leader, "RANK": "1"}
    moved = [with_store_port(env, cluster="/state", namespace="ml") for env in (leader, worker)]
    port = moved[0]["MASTER_PORT"]
    assert int(port) in PORTS and port == str(store_port("/state", "ml", "g-leader-0-0.g", 29500))
    assert all(env["MASTER_PORT"] == env["AE_COORDINATOR_PORT"] == port for env in moved)
    assert [env["RANK"] for env in moved] == ["0", "1"] and moved[0]["MASTER_ADDR"] == "g-leader-0-0.g"
    # The same group in another cluster on the host (another test session): another port.
    assert with_store_port(leader, cluster="/other", namespace="ml")["MASTER_PORT"] != port
    # Only the contract's coordinator variables: that pair is the rendezvous.
    only_contract = {"AE_COORDINATOR_ADDR": "g-leader-0-0.g", "AE_COORDINATOR_PORT": "29500"}
    assert with_store_port(only_contract, cluster="/state", namespace="ml")["AE_COORDINATOR_PORT"] == port


def test_torchruns_rendezvous_wins_over_the_others():
    env = {**TRAINER, "MASTER_ADDR": "elsewhere", "MASTER_PORT": "29500"}
    moved = with_store_port(env, cluster="/state", namespace="ml")
    assert moved["PET_MASTER_PORT"] == moved["MASTER_PORT"] == str(store_port("/state", "ml", "tj-node-0-0.tj", 29500))


def test_a_pod_without_a_rendezvous_is_left_alone():
    plain = {"METRICS_PORT": "9090", "MASTER_PORT": "29500"}  # a port with no address: nothing to rendezvous at
    assert with_store_port(plain, cluster="/state", namespace="ml") == plain
    for addr, port in (("PET_MASTER_ADDR", "PET_MASTER_PORT"), ("MASTER_ADDR", "MASTER_PORT")):
        unexpanded = {addr: "x", port: "$(P)"}
        assert with_store_port(unexpanded, cluster="c", namespace="n") == unexpanded


def test_an_elastic_jobs_rendezvous_endpoint_is_moved_with_the_ports_that_name_it():
    """An elastic PyTorchJob's torchrun agents meet at ``PET_RDZV_ENDPOINT`` (c10d): the agent on its host serves the
    store there, on every interface; an etcd endpoint is an outside server and stays."""
    elastic = {"PET_RDZV_ENDPOINT": "job-worker-0:29400", "PET_RDZV_BACKEND": "c10d", "PET_NNODES": "1:2"}
    moved = with_store_port(elastic, cluster="/state", namespace="ml")
    port = store_port("/state", "ml", "job-worker-0", 29400)
    assert moved == {**elastic, "PET_RDZV_ENDPOINT": f"job-worker-0:{port}"}
    # With a master too, the endpoint is what torchrun uses: it and the variables holding its port move.
    both = {**elastic, "PET_MASTER_ADDR": "job-master-0", "PET_MASTER_PORT": "29400"}
    assert with_store_port(both, cluster="/state", namespace="ml")["PET_MASTER_PORT"] == str(port)
    etcd = {**elastic, "PET_RDZV_BACKEND": "etcd"}
    assert with_store_port(etcd, cluster="/state", namespace="ml") == etcd


LIGHTHOUSE_URL = "http://ft-lighthouse-0-0.ft:29510"


def replica_group(index: int) -> dict[str, str]:
    """A fault-tolerant group's replica-group pod, its env as the renderer writes it (after $(VAR) expansion)."""
    return {
        "MASTER_ADDR": f"ft-trainer-{index}-0.ft",
        "MASTER_PORT": "29500",
        "TORCHFT_LIGHTHOUSE": LIGHTHOUSE_URL,
        "TORCHFT_MANAGER_PORT": "29511",
    }


def test_torchft_ports_move_per_cluster_and_per_replica_group():
    lighthouse = with_store_port(
        {"TORCHFT_LIGHTHOUSE": LIGHTHOUSE_URL, "TORCHFT_LIGHTHOUSE_PORT": "29510"}, cluster="/state", namespace="ml"
    )
    groups = [with_store_port(replica_group(i), cluster="/state", namespace="ml") for i in range(3)]
    moved = lighthouse["TORCHFT_LIGHTHOUSE_PORT"]
    assert moved != "29510" and int(moved) in PORTS
    assert {g["TORCHFT_LIGHTHOUSE"] for g in groups} == {lighthouse["TORCHFT_LIGHTHOUSE"]}
    assert lighthouse["TORCHFT_LIGHTHOUSE"] == f"http://ft-lighthouse-0-0.ft:{moved}"
    ports = [(g["MASTER_PORT"], g["TORCHFT_MANAGER_PORT"]) for g in groups]
    assert len({p for pair in ports for p in pair}) == 6  # no two replica groups share a store or manager port
    other = with_store_port(replica_group(0), cluster="/another-cluster", namespace="ml")
    assert other["TORCHFT_LIGHTHOUSE"] != lighthouse["TORCHFT_LIGHTHOUSE"]
    assert other["TORCHFT_MANAGER_PORT"] != groups[0]["TORCHFT_MANAGER_PORT"]
