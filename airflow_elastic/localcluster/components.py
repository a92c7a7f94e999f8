"""Wiring of the cluster's parts inside the server process: admission, controllers, scheduler, kubelet."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

from airflow_elastic.localcluster import admission, clusterdns, crds, errors
from airflow_elastic.localcluster.clock import Clock
from airflow_elastic.localcluster.config import ClusterConfig
from airflow_elastic.localcluster.controller import Manager
from airflow_elastic.localcluster.controllers import namespaces
from airflow_elastic.localcluster.controllers.cronjob import CronJobController
from airflow_elastic.localcluster.controllers.deployment import DeploymentController
from airflow_elastic.localcluster.controllers.gc import GarbageCollector
from airflow_elastic.localcluster.controllers.inferenceservice import InferenceServiceController
from airflow_elastic.localcluster.controllers.job import JobController
from airflow_elastic.localcluster.controllers.jobset import JobSetController
from airflow_elastic.localcluster.controllers.podautoscaler import HorizontalPodAutoscalerController
from airflow_elastic.localcluster.controllers.pytorchjob import PyTorchJobController
from airflow_elastic.localcluster.controllers.raycluster import RayClusterController
from airflow_elastic.localcluster.controllers.rayjob import RayJobController
from airflow_elastic.localcluster.controllers.replicaset import ReplicaSetController
from airflow_elastic.localcluster.controllers.scheduler import Scheduler
from airflow_elastic.localcluster.controllers.serviceendpoints import EndpointsController, EndpointSliceController
from airflow_elastic.localcluster.controllers.trainjob import install as install_trainer
from airflow_elastic.localcluster.events import Recorder
from airflow_elastic.localcluster.kubelet import Kubelet, reap_orphans
from airflow_elastic.localcluster.kubelet.nodes import register_nodes
from airflow_elastic.localcluster.kubelet.stats import Scraper
from airflow_elastic.localcluster.kubeproxy import Proxier
from airflow_elastic.localcluster.network import LOOPBACK, Network
from airflow_elastic.localcluster.podnet import PodNetwork
from airflow_elastic.localcluster.resources import NAMESPACES
from airflow_elastic.localcluster.store import Store

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def bootstrap(store: Store) -> None:
    """Objects every cluster has (idempotent: a restarted cluster keeps its own)."""
    for name in SYSTEM_NAMESPACES:
        with contextlib.suppress(errors.AlreadyExists):
            store.create(NAMESPACES, None, {"metadata": {"name": name}})
    crds.install(store)


def install(
    store: Store,
    manager: Manager,
    config: ClusterConfig,
    state_dir: Path,
    api_address: Callable[[], str] | None = None,
    clock: Clock | None = None,
    pod_network: PodNetwork | None = None,
) -> Recorder:
    """Register admission plugins and controllers on ``manager``; returns the shared event recorder.
    ``api_address`` gives the API server's ``host:port`` once it listens (pods get in-cluster credentials);
    ``clock`` is the controller clock of the CronJob, Deployment and ReplicaSet controllers (default: the real
    time); ``pod_network``: the cluster's bridge when pods get network namespaces (else they share the host's)."""
    recorder = Recorder(store)
    namespaces.install(store, manager)
    bootstrap(store)
    manager.add(GarbageCollector(store))
    admission.register(store, jobset_restart_job=config.jobset_restart_job)
    manager.add(JobController(store, recorder, config.job_pod_failure_backoff_seconds))
    clock = clock or Clock()
    manager.add(CronJobController(store, recorder, clock))
    manager.add(DeploymentController(store, recorder, clock))
    manager.add(ReplicaSetController(store, recorder, clock))
    manager.add(EndpointsController(store))
    manager.add(EndpointSliceController(store))
    manager.add(JobSetController(store, recorder, restart_job=config.jobset_restart_job))
    manager.add(InferenceServiceController(store, recorder))
    manager.add(PyTorchJobController(store, recorder))
    manager.add(RayClusterController(store, recorder))
    manager.add(RayJobController(store, recorder))
    install_trainer(store, manager, recorder)  # TrainJobs and the default torch-distributed runtime
    register_nodes(store, config)
    reap_orphans(state_dir)  # processes of a previous run that died without stopping them
    proxier = None
    if pod_network is not None:  # Services get virtual IPs where pods have their own network
        proxier = Proxier(store, pod_network.subnet, pod_network.add_address, pod_network.remove_address)
        manager.add(proxier)
        manager.shutdown_hooks.append(proxier.close)
    network = Network(
        store, state_dir, pod_network.subnet if pod_network else LOOPBACK, proxier.vip if proxier else None
    )
    if pod_network is not None and (dns := clusterdns.serve(store, network, pod_network.gateway)) is not None:
        network.cluster_dns = True
        pod_network.resolv_dir = state_dir / "dns"
        pod_network.resolv_dir.mkdir(parents=True, exist_ok=True)
        manager.shutdown_hooks.append(dns.close)
    scheduler, kubelet = (
        Scheduler(store, recorder),
        Kubelet(
            store,
            recorder,
            config,
            state_dir,
            network,
            api_address=api_address,
            pod_network=pod_network,
        ),
    )
    for part in (scheduler, kubelet):
        manager.add(part)
        part.resync()
    manager.shutdown_hooks.append(kubelet.shutdown)
    # The kubelet's measurements, served as metrics.k8s.io (api/metrics.py) and read by the HPA controller.
    kubelet.stats = Scraper(kubelet.running_pods, config.metric_resolution_seconds)
    manager.add(HorizontalPodAutoscalerController(store, recorder, clock, kubelet.stats, config.hpa_sync_seconds))
    return recorder
