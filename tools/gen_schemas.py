"""Regenerate the JSON schemas that ``airflow_elastic`` carries as package data.

Inputs are the upstream copies in ``../shared/k8s/crds`` (the JobSet CRD and the Kubernetes 1.35 core/v1
OpenAPI document). Outputs drop every ``description`` (upstream prose) and keep only what validation needs:

* ``jobset.x-k8s.io_v1alpha2.json`` - the CRD's ``openAPIV3Schema`` (structural schema, incl. the embedded
  batch/v1 Job and core/v1 Pod templates);
* ``core_v1_podtemplatespec.json`` - ``io.k8s.api.core.v1.PodTemplateSpec`` with the transitive closure of the
  component schemas it references, under ``components.schemas`` so the ``$ref``s resolve unchanged.

Usage: ``python tools/gen_schemas.py [--shared ../shared]``. The run is deterministic (sorted keys), so a
diff after regeneration means upstream changed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "airflow_elastic" / "schemas"
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


def jobset_schema(shared: Path) -> dict[str, Any]:
    crd = yaml.safe_load((shared / "k8s/crds/jobset.x-k8s.io_jobsets.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2"]
    return strip_prose(version["schema"]["openAPIV3Schema"])


def pod_template_schema(shared: Path) -> dict[str, Any]:
    doc = json.loads((shared / "k8s/crds/k8s-1.35_api__v1_openapi.json").read_text())
    root = "io.k8s.api.core.v1.PodTemplateSpec"
    return {
        "$ref": REF_PREFIX + root,
        "components": {"schemas": strip_prose(closure(doc["components"]["schemas"], root))},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    for name, schema in (
        ("jobset.x-k8s.io_v1alpha2.json", jobset_schema(args.shared)),
        ("core_v1_podtemplatespec.json", pod_template_schema(args.shared)),
    ):
        path = OUT / name
        path.write_text(json.dumps(schema, sort_keys=True, separators=(",", ":")) + "\n")
        print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()
