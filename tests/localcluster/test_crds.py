"""The CustomResourceDefinitions of the served custom resources, through the kubernetes client and kubectl."""

from __future__ import annotations

from kubernetes import client

from airflow_elastic.kube import schemas


def test_each_custom_resource_has_its_crd_with_the_packaged_schema(api_client, kubectl):
    crds = client.ApiextensionsV1Api(api_client)
    names = {c.metadata.name for c in crds.list_custom_resource_definition().items}
    assert {"jobsets.jobset.x-k8s.io", "trainjobs.trainer.kubeflow.org", "pytorchjobs.kubeflow.org"} <= names
    raw = api_client.sanitize_for_serialization(crds.read_custom_resource_definition("trainjobs.trainer.kubeflow.org"))
    [version] = raw["spec"]["versions"]
    assert (version["name"], version["served"], raw["spec"]["scope"]) == ("v1alpha1", True, "Namespaced")
    assert version["schema"]["openAPIV3Schema"] == schemas.load(schemas.TRAINJOBS)
    assert {c["type"]: c["status"] for c in raw["status"]["conditions"]} == {
        "NamesAccepted": "True",
        "Established": "True",
    }
    runtimes = crds.read_custom_resource_definition("clustertrainingruntimes.trainer.kubeflow.org")
    assert runtimes.spec.scope == "Cluster"
    assert kubectl("get", "crds").stdout.split()[:3] == ["NAME", "CREATED", "AT"]
