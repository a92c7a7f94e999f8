"""Protobuf bodies (kubectl's `create <generator>` commands) get a clear 415, not a JSON decoding error."""

from __future__ import annotations


def test_protobuf_body_is_refused_with_415_and_json_still_works(kubectl, namespace):
    refused = kubectl("create", "configmap", "settings", "-n", namespace, "--from-literal=a=b", check=False)
    assert refused.returncode != 0
    assert "does not decode application/vnd.kubernetes.protobuf; send application/json" in refused.stderr
    manifest = (
        f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {namespace}\ndata:\n  a: b\n"
    )
    kubectl("create", "-f", "-", stdin=manifest)
    assert kubectl("get", "configmap", "settings", "-n", namespace, "-o", "jsonpath={.data.a}").stdout == "b"
