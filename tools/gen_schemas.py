"""Regenerate the JSON schemas that ``airflow_elastic`` carries as package data.

Inputs, in one folder (``--crds DIR``), are the upstream files: the JobSet CRD
``jobset.x-k8s.io_jobsets.yaml`` (kubernetes-sigs/jobset, ``config/components/crd/bases/``) and the Kubernetes 1.35
core/v1 and batch/v1 OpenAPI documents ``k8s-1.35_api__v1_openapi.json`` and
``k8s-1.35_apis__batch__v1_openapi.json`` (kubernetes/kubernetes, ``api/openapi-spec/v3/api__v1_openapi.json`` and
``apis__batch__v1_openapi.json``, renamed). Outputs drop every ``description`` (upstream prose) and keep only what
validation needs:

* ``jobset.x-k8s.io_v1alpha2.json`` - the CRD's ``openAPIV3Schema`` (structural schema, incl. the embedded
  batch/v1 Job and core/v1 Pod templates);
* ``core_v1_podtemplatespec.json`` - ``io.k8s.api.core.v1.PodTemplateSpec`` with the transitive closure of the
  component schemas it references, under ``components.schemas`` so the ``$ref``s resolve unchanged;
* ``<group>_<version>_<plural>.json`` - the ``openAPIV3Schema`` of the interop CRDs: Kubeflow Trainer v2.3
  ``trainer.kubeflow.org_{trainjobs,clustertrainingruntimes,trainingruntimes}.yaml`` (kubeflow/trainer
  ``manifests/base/crds/``), training-operator v1.9 ``kubeflow.org_pytorchjobs.yaml`` (``release-1.9``,
  ``manifests/base/crds/``) and KServe v0.20 ``serving.kserve.io_inferenceservices.yaml`` (``config/crd/full/``,
  trimmed of the framework-specific predictor stubs, explainer and transformer), and KubeRay v1.7.0
  ``ray.io_{rayjobs,rayclusters}.yaml`` (ray-project/kuberay ``ray-operator/config/crd/bases/``, version ``v1``);
* ``batch_v1.json`` - ``io.k8s.api.batch.v1.Job`` and ``io.k8s.api.batch.v1.CronJob`` with the closure of what they
  reference (incl. core/v1 and meta/v1), under ``components.schemas`` (no root: ``schemas.batch_v1(kind)`` adds one).

Usage: ``python tools/gen_schemas.py --crds DIR`` (``make schemas CRDS=DIR``). The run is deterministic (sorted
keys), so a diff after regeneration means upstream changed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "airflow_elastic" / "kube" / "schemas"
REF_PREFIX = "#/components/schemas/"


def strip_prose(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: strip_prose(v) for k, v in node.items() if k not in ("description", "example")}
    if isinstance(node, list):
        return [strip_prose(v) for v in node]
    return node


def refs(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(REF_PREFIX):
            found.add(ref[len(REF_PREFIX) :])
        for v in node.values():
            found |= refs(v)
    elif isinstance(node, list):
        for v in node:
            found |= refs(v)
    return found


def closure(schemas: dict[str, Any], root: str) -> dict[str, Any]:
    todo, seen = [root], {}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen[name] = schemas[name]
        todo.extend(refs(schemas[name]) - seen.keys())
    return seen


JOBSET_CRD = "jobset.x-k8s.io_jobsets.yaml"
#: The interop CRDs (Kubeflow Trainer v2.3, training-operator v1.9, KServe v0.20, KubeRay v1.7), each checked against
#: by the renderers and all but KubeRay's served by the local cluster: ``<group>_<version>_<plural>.json`` is its
#: ``openAPIV3Schema``.
INTEROP_CRDS = (
    "trainer.kubeflow.org_trainjobs.yaml",
    "trainer.kubeflow.org_clustertrainingruntimes.yaml",
    "trainer.kubeflow.org_trainingruntimes.yaml",
    "kubeflow.org_pytorchjobs.yaml",
    "serving.kserve.io_inferenceservices.yaml",
    "ray.io_rayjobs.yaml",
    "ray.io_rayclusters.yaml",
)
#: CRDs that serve more than one version, and the one packaged (KubeRay v1.7 still serves ``v1alpha1``).
PACKAGED_VERSION = {"ray.io_rayjobs.yaml": "v1", "ray.io_rayclusters.yaml": "v1"}
CORE_OPENAPI = "k8s-1.35_api__v1_openapi.json"
BATCH_OPENAPI = "k8s-1.35_apis__batch__v1_openapi.json"


def jobset_schema(crds: Path) -> dict[str, Any]:
    crd = yaml.safe_load((crds / JOBSET_CRD).read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2"]
    return strip_prose(version["schema"]["openAPIV3Schema"])


def crd_schema(crds: Path, name: str) -> tuple[str, dict[str, Any]]:
    """``(output file name, openAPIV3Schema)`` of the CRD file ``name``'s version: the one of
    :data:`PACKAGED_VERSION`, else its single served version."""
    crd = yaml.safe_load((crds / name).read_text())
    wanted = PACKAGED_VERSION.get(name)
    (version,) = [v for v in crd["spec"]["versions"] if (v["name"] == wanted if wanted else v.get("served", True))]
    out = f"{crd['spec']['group']}_{version['name']}_{crd['spec']['names']['plural']}.json"
    return out, strip_prose(version["schema"]["openAPIV3Schema"])


def pod_template_schema(crds: Path) -> dict[str, Any]:
    doc = json.loads((crds / CORE_OPENAPI).read_text())
    root = "io.k8s.api.core.v1.PodTemplateSpec"
    return {
        "$ref": REF_PREFIX + root,
        "components": {"schemas": strip_prose(closure(doc["components"]["schemas"], root))},
    }


def batch_schema(crds: Path) -> dict[str, Any]:
    components = json.loads((crds / BATCH_OPENAPI).read_text())["components"]["schemas"]
    found: dict[str, Any] = {}
    for root in ("io.k8s.api.batch.v1.Job", "io.k8s.api.batch.v1.CronJob"):
        found |= closure(components, root)
    return {"components": {"schemas": strip_prose(found)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    inputs = (JOBSET_CRD, CORE_OPENAPI, BATCH_OPENAPI, *INTEROP_CRDS)
    files = ", ".join(inputs)
    parser.add_argument("--crds", type=Path, required=True, help=f"folder holding {files}")
    args = parser.parse_args()
    missing = [name for name in inputs if not (args.crds / name).is_file()]
    if missing:
        parser.error(f"{args.crds} lacks {', '.join(missing)} (see this script's docstring for the upstream files)")
    OUT.mkdir(parents=True, exist_ok=True)
    for name, schema in (
        ("jobset.x-k8s.io_v1alpha2.json", jobset_schema(args.crds)),
        ("core_v1_podtemplatespec.json", pod_template_schema(args.crds)),
        ("batch_v1.json", batch_schema(args.crds)),
        *(crd_schema(args.crds, name) for name in INTEROP_CRDS),
    ):
        path = OUT / name
        path.write_text(json.dumps(schema, sort_keys=True, separators=(",", ":")) + "\n")
        print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()
