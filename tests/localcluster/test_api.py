"""The API server's verbs and errors, through the official ``kubernetes`` client only."""

from __future__ import annotations

import json

import pytest
from kubernetes.client import ApiException
from kubernetes.watch import Watch

from tests.support.api_objects import JOBSET_GROUP, JOBSET_VERSION, jobset


def status_of(err: ApiException) -> dict:
    return json.loads(err.body)


def pod(name: str, **labels: str) -> dict:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["sleep", "1"]}]},
    }


def test_crud_configmap_and_server_set_fields(core, namespace):
    created = core.create_namespaced_config_map(namespace, {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    meta = created.metadata
    assert meta.namespace == namespace and meta.uid and meta.resource_version and meta.creation_timestamp
    got = core.read_namespaced_config_map("cm", namespace)
    assert got.data == {"a": "1"} and got.metadata.uid == meta.uid
    got.data["b"] = "2"
    replaced = core.replace_namespaced_config_map("cm", namespace, got)
    assert int(replaced.metadata.resource_version) > int(meta.resource_version)
    assert [c.metadata.name for c in core.list_namespaced_config_map(namespace).items] == ["cm"]
    core.delete_namespaced_config_map("cm", namespace)
    with pytest.raises(ApiException) as err:
        core.read_namespaced_config_map("cm", namespace)
    assert err.value.status == 404 and status_of(err.value)["reason"] == "NotFound"


def test_generate_name_secret_and_service(core, namespace):
    secret = core.create_namespaced_secret(namespace, {"metadata": {"generateName": "tok-"}, "stringData": {"k": "v"}})
    assert secret.metadata.name.startswith("tok-") and len(secret.metadata.name) == len("tok-") + 5
    long = "a" * 70 + "-"  # cut to 58 characters before the random suffix, as the API server does
    secret = core.create_namespaced_secret(namespace, {"metadata": {"generateName": long}, "stringData": {"k": "v"}})
    assert secret.metadata.name[:58] == long[:58] and len(secret.metadata.name) == 63
    service = {"metadata": {"name": "svc"}, "spec": {"clusterIP": "None", "selector": {"app": "x"}}}
    assert core.create_namespaced_service(namespace, service).spec.cluster_ip == "None"
    assert core.list_namespaced_service(namespace).items[0].metadata.name == "svc"


def test_jobset_round_trip_with_crd_defaults(custom, namespace):
    args = (JOBSET_GROUP, JOBSET_VERSION, namespace, "jobsets")
    created = custom.create_namespaced_custom_object(*args, jobset("js"))
    assert created["metadata"]["generation"] == 1
    assert created["spec"]["replicatedJobs"][0]["groupName"] == "default"  # CRD schema default
    for _ in range(10):  # read-modify-write, retried on conflict as clients do: the JobSet controller writes too
        got = custom.get_namespaced_custom_object(*args, "js")
        assert got["spec"]["replicatedJobs"][0]["replicas"] == 2
        got["spec"]["suspend"] = True  # replicatedJobs are immutable (the JobSet webhook)
        try:
            replaced = custom.replace_namespaced_custom_object(*args, "js", got)
            break
        except ApiException as err:
            assert err.status == 409 and status_of(err)["reason"] == "Conflict", err
    assert replaced["metadata"]["generation"] == 2
    patched = custom.patch_namespaced_custom_object(*args, "js", {"metadata": {"labels": {"extra": "yes"}}})
    assert patched["metadata"]["labels"] == {"app": "train", "extra": "yes"}
    assert [i["metadata"]["name"] for i in custom.list_namespaced_custom_object(*args)["items"]] == ["js"]
    status = {"status": {"restarts": 1}}
    patched = custom.patch_namespaced_custom_object_status(*args, "js", status)
    assert patched["status"]["restarts"] == 1
    custom.delete_namespaced_custom_object(*args, "js")
    assert custom.list_namespaced_custom_object(*args)["items"] == []


def test_already_exists_versus_conflict(core, namespace):
    first = core.create_namespaced_config_map(namespace, {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    with pytest.raises(ApiException) as exists:
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "cm"}})
    assert exists.value.status == 409 and status_of(exists.value)["reason"] == "AlreadyExists"
    core.patch_namespaced_config_map("cm", namespace, {"data": {"a": "2"}})
    with pytest.raises(ApiException) as conflict:
        core.replace_namespaced_config_map("cm", namespace, first)  # stale resourceVersion
    body = status_of(conflict.value)
    assert conflict.value.status == 409 and body["reason"] == "Conflict"
    assert "the object has been modified" in body["message"]


def test_invalid_objects_get_422_with_causes(core, custom, namespace):
    with pytest.raises(ApiException) as bad_name:
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "Bad_Name"}})
    body = status_of(bad_name.value)
    assert bad_name.value.status == 422 and body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    broken = jobset("js")
    broken["spec"]["replicatedJobs"][0]["replicas"] = "two"
    del broken["spec"]["replicatedJobs"][0]["name"]
    with pytest.raises(ApiException) as bad_js:
        custom.create_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, namespace, "jobsets", broken)
    causes = {c["field"]: c for c in status_of(bad_js.value)["details"]["causes"]}
    assert bad_js.value.status == 422
    assert causes["spec.replicatedJobs[0].replicas"]["reason"] == "FieldValueTypeInvalid"
    assert causes["spec.replicatedJobs[0].name"]["reason"] == "FieldValueRequired"


def test_missing_namespace_and_unknown_path(core):
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map("no-such-namespace", {"metadata": {"name": "cm"}})
    assert err.value.status == 404 and status_of(err.value)["details"]["kind"] == "namespaces"
    with pytest.raises(ApiException) as unknown:
        core.api_client.call_api("/api/v1/widgets", "GET", auth_settings=["BearerToken"], _preload_content=False)
    assert unknown.value.status == 404


def test_method_not_allowed(core, namespace):
    with pytest.raises(ApiException) as err:
        core.api_client.call_api(f"/api/v1/namespaces/{namespace}/pods/p/log", "DELETE", auth_settings=["BearerToken"])
    assert err.value.status == 405 and status_of(err.value)["reason"] == "MethodNotAllowed"


def test_label_and_field_selectors(core, namespace):
    for name, tier in (("a", "web"), ("b", "web"), ("c", "db")):
        core.create_namespaced_pod(namespace, pod(name, tier=tier))

    def names(**kwargs) -> list[str]:
        return [p.metadata.name for p in core.list_namespaced_pod(namespace, **kwargs).items]

    assert names(label_selector="tier=web") == ["a", "b"]
    assert names(label_selector="tier in (db),!missing") == ["c"]
    assert names(field_selector="metadata.name!=a") == ["b", "c"]
    assert names(field_selector="spec.restartPolicy=Always,metadata.name=c") == ["c"]
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod(namespace, field_selector="spec.containers=x")
    assert err.value.status == 400 and "not a known field selector" in status_of(err.value)["message"]
    with pytest.raises(ApiException) as err:
        core.list_namespaced_config_map(namespace, field_selector="data.a=1")
    assert err.value.status == 400


def test_limit_and_continue(core, namespace):
    for i in range(5):
        core.create_namespaced_config_map(namespace, {"metadata": {"name": f"cm-{i}"}})
    seen, token = [], None
    while True:
        page = core.list_namespaced_config_map(namespace, limit=2, _continue=token)
        seen += [c.metadata.name for c in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert seen == [f"cm-{i}" for i in range(5)]


def test_patch_types(core, custom, namespace):
    core.create_namespaced_pod(namespace, pod("p", a="1"))
    image = {"spec": {"containers": [{"name": "main", "image": "busybox:2"}]}}
    patched = core.patch_namespaced_pod("p", namespace, image)  # the client sends a strategic merge patch
    assert [(c.name, c.image, c.command) for c in patched.spec.containers] == [("main", "busybox:2", ["sleep", "1"])]
    core.api_client.set_default_header("Content-Type", "application/merge-patch+json")
    try:
        merged = core.patch_namespaced_pod("p", namespace, {"metadata": {"labels": {"a": None, "b": "2"}}})
    finally:
        core.api_client.default_headers.pop("Content-Type")
    assert merged.metadata.labels == {"b": "2"}
    ops = [
        {"op": "add", "path": "/metadata/labels/c", "value": "3"},
        {"op": "test", "path": "/metadata/labels/b", "value": "2"},
    ]
    assert core.patch_namespaced_pod("p", namespace, ops).metadata.labels == {"b": "2", "c": "3"}
    with pytest.raises(ApiException) as failed:
        core.patch_namespaced_pod("p", namespace, [{"op": "test", "path": "/metadata/labels/b", "value": "x"}])
    assert failed.value.status == 422
    custom.create_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, namespace, "jobsets", jobset("js"))
    path = f"/apis/{JOBSET_GROUP}/{JOBSET_VERSION}/namespaces/{namespace}/jobsets/js"
    for content_type in ("application/strategic-merge-patch+json", "application/apply-patch+yaml"):
        with pytest.raises(ApiException) as err:
            core.api_client.call_api(
                path,
                "PATCH",
                body={"metadata": {}},
                header_params={"Content-Type": content_type},
                auth_settings=["BearerToken"],
            )
        assert err.value.status == 415 and status_of(err.value)["reason"] == "UnsupportedMediaType"


def test_field_validation_strict_warn_and_dry_run(core, custom, namespace):
    body = pod("p")
    body["spec"]["foo"] = 1
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(namespace, body, field_validation="Strict")
    assert err.value.status == 400
    assert status_of(err.value)["message"] == 'strict decoding error: unknown field "spec.foo"'
    bad_js = jobset("js")
    bad_js["spec"]["replicatedJobs"][0]["bogus"] = True
    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, namespace, "jobsets", bad_js, field_validation="Strict"
        )
    assert 'unknown field "spec.replicatedJobs[0].bogus"' in status_of(err.value)["message"]
    created = core.create_namespaced_pod(namespace, body)  # default (Warn): the unknown field is dropped
    assert created.metadata.name == "p"
    raw = core.api_client.call_api(
        f"/api/v1/namespaces/{namespace}/pods/p", "GET", auth_settings=["BearerToken"], _preload_content=False
    )
    assert "foo" not in json.loads(raw.data)["spec"]
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "dry"}}, dry_run="All")
    assert core.list_namespaced_config_map(namespace).items == []


def test_delete_foreground_keeps_owner_until_dependents_are_gone(core, namespace):
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner.metadata.uid,
        "blockOwnerDeletion": True,
    }
    dependent = {"metadata": {"name": "dep", "ownerReferences": [ref], "finalizers": ["test/hold"]}}
    core.create_namespaced_config_map(namespace, dependent)
    core.delete_namespaced_config_map("owner", namespace, propagation_policy="Foreground")
    held = core.read_namespaced_config_map("owner", namespace)
    assert held.metadata.deletion_timestamp and "foregroundDeletion" in held.metadata.finalizers
    rv = core.list_namespaced_config_map(namespace).metadata.resource_version
    core.patch_namespaced_config_map("dep", namespace, {"metadata": {"finalizers": None}})
    gone = set()
    for event in Watch().stream(core.list_namespaced_config_map, namespace, resource_version=rv, timeout_seconds=30):
        if event["type"] == "DELETED":
            gone.add(event["object"].metadata.name)
        if gone == {"dep", "owner"}:
            break
    assert gone == {"dep", "owner"}


def wait_deleted(core, namespace: str, name: str, rv: str) -> None:
    """Block on a configmap watch until ``name`` is deleted."""
    for event in Watch().stream(core.list_namespaced_config_map, namespace, resource_version=rv, timeout_seconds=30):
        if event["type"] == "DELETED" and event["object"].metadata.name == name:
            return
    raise AssertionError(f"{name} was not deleted")


def test_delete_orphan_and_preconditions(core, namespace):
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "dep", "ownerReferences": [ref]}})
    with pytest.raises(ApiException) as err:
        core.delete_namespaced_config_map("owner", namespace, body={"preconditions": {"uid": "not-the-uid"}})
    assert err.value.status == 409
    rv = core.list_namespaced_config_map(namespace).metadata.resource_version
    core.delete_namespaced_config_map("owner", namespace, body={"propagationPolicy": "Orphan"})
    wait_deleted(core, namespace, "owner", rv)  # the orphan finalizer is released after dependents are orphaned
    assert core.read_namespaced_config_map("dep", namespace).metadata.owner_references is None


def test_delete_collection_with_selector(core, namespace):
    for name, keep in (("a", "no"), ("b", "no"), ("c", "yes")):
        core.create_namespaced_config_map(namespace, {"metadata": {"name": name, "labels": {"keep": keep}}})
    core.delete_collection_namespaced_config_map(namespace, label_selector="keep=no")
    assert [c.metadata.name for c in core.list_namespaced_config_map(namespace).items] == ["c"]


def test_namespace_terminates_and_empties(core):
    core.create_namespace({"metadata": {"name": "doomed"}})
    ns = core.read_namespace("doomed")
    assert ns.status.phase == "Active" and ns.spec.finalizers == ["kubernetes"]
    core.create_namespaced_config_map("doomed", {"metadata": {"name": "cm"}})
    rv = core.list_namespace().metadata.resource_version
    core.delete_namespace("doomed")
    phases = []
    for event in Watch().stream(
        core.list_namespace, field_selector="metadata.name=doomed", resource_version=rv, timeout_seconds=30
    ):
        phases.append((event["type"], event["object"].status.phase))
        if event["type"] == "DELETED":
            break
    assert ("MODIFIED", "Terminating") in phases and phases[-1][0] == "DELETED"
    with pytest.raises(ApiException) as err:
        core.read_namespaced_config_map("cm", "doomed")
    assert err.value.status == 404
