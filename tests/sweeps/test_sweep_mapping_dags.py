"""One task per trial under ``airflow dags test`` (``dags/sweep_mapping_dags.py``): mapped ``trial_params`` reach
the pods, the templated args and per-trial checkpoint URIs, and ``select_best`` picks the optimum."""

from __future__ import annotations

import json

from airflow_elastic.contract import markers
from airflow_elastic.training.render.trial import params_digest
from tests.support.airflow_env import dags_test, tail, task_states
from tests.support.training_group_helpers import jobsets, pods_of, xcom


def test_mapped_trials_and_select_best(cluster_airflow_env, airflow_db, namespace, api_client, tmp_path):
    from kubernetes import client

    dag_id = "sweep_mapped"
    result = dags_test(dag_id, cluster_airflow_env, conf={"namespace": namespace, "base": str(tmp_path)})
    states = task_states(airflow_db, dag_id)
    assert states == {**{f"trial[{i}]": "success" for i in range(4)}, "best": "success"}, tail(result.stdout)

    best = xcom(airflow_db, dag_id, "best")
    assert best["best_params"] == {"lr": 0.01, "layers": 1} and best["trial_params"] == best["best_params"]
    assert best["metrics"]["argv"] == ["--lr=0.01"]  # {{ trial.params.lr }} replaced in args
    digest = params_digest(best["trial_params"])
    assert best["metrics"]["checkpoint"] == f"{tmp_path}/mapped/trial/trial-{best['index'] + 1}-{digest}"

    # Read back from the cluster: every trial's pod got its own parameters and printed its intermediate values.
    found = jobsets(api_client, namespace)
    assert len(found) == 4
    seen = []
    for name in found:
        [pod] = pods_of(api_client, namespace, name)
        env = {e.name: e.value for e in pod.spec.containers[0].env}
        params = json.loads(env["AE_TRIAL_PARAMS"])
        seen.append(params)
        raw = client.CoreV1Api(api_client).read_namespaced_pod_log(pod.metadata.name, namespace, _preload_content=False)
        log = raw.data.decode()  # (the client's own decoding would json-parse the text)
        assert [parsed[0] for line in log.splitlines() if (parsed := markers.parse(line))] == [1, 2], log
    first_four = [(0.001, 1), (0.001, 2), (0.01, 1), (0.01, 2)]  # sweep_params(SPACE, n=4): grid order
    assert sorted((p["lr"], p["layers"]) for p in seen) == first_four
