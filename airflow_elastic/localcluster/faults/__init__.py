"""Failure injection for the local cluster: node and pod disruptions, API faults, a random preemption schedule.

:mod:`injector` wires them into the API server (the ``/debug/disruptions`` and ``/debug/faults`` endpoints);
:mod:`client` is their Python API on :class:`~airflow_elastic.localcluster.LocalCluster`.
"""
