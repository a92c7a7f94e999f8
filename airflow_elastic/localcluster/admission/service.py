"""core/v1 Service defaulting (``pkg/apis/core/v1/defaults.go SetDefaults_Service``) and the port checks of
``ValidateService`` the service proxy relies on. No cluster IP is allocated: there is no kube-proxy to route it;
a non-headless Service is reached through the API server's service proxy or its DNS name (:mod:`..network`)."""

from __future__ import annotations

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.admission.common import Causes, invalid, required
from airflow_elastic.localcluster.store import Obj


def default_service(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        if port.get("targetPort") in (None, 0, ""):
            port["targetPort"] = port.get("port")


def service_causes(obj: Obj) -> Causes:
    causes: Causes = []
    ports = (obj.get("spec") or {}).get("ports") or []
    for i, port in enumerate(ports):
        number = port.get("port")
        if not isinstance(number, int) or not 0 < number < 65536:
            causes.append(invalid(f"spec.ports[{i}].port", number, "must be between 1 and 65535, inclusive"))
        if len(ports) > 1 and not port.get("name"):
            causes.append(required(f"spec.ports[{i}].name"))
    return causes


class ServiceAdmission:
    def admit_create(self, obj: Obj) -> None:
        default_service(obj)
        if causes := service_causes(obj):
            raise errors.Invalid.of("Service", obj["metadata"].get("name", ""), causes)

    def admit_update(self, obj: Obj, old: Obj) -> None:
        self.admit_create(obj)
