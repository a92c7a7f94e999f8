"""The packaged schemas (``airflow_elastic/kube/schemas``) are the source the renderers and the local cluster check
against: each parses and carries no upstream prose, together they declare every field the renderers emit (an API
server would prune an undeclared one silently), and they are exactly what ``tools/gen_schemas.py`` writes.

The last is checked without the upstream files: inputs shaped as upstream ships them (a CRD with prose, an extra
unserved version and unreferenced components) are built from the packaged schemas, and the generator must write the
packaged files back byte for byte. Where the upstream copies are at hand (``AIRFLOW_ELASTIC_UPSTREAM_CRDS`` or
``../shared/k8s/crds``), the generator is also run on them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_elastic import BatchStage, Placement, Resources, Role
from airflow_elastic.kube import schemas
from airflow_elastic.ray import RayCluster, RayHead, RayJob, WorkerGroup
from airflow_elastic.ray.render import render_cluster_spec, render_rayjob
from airflow_elastic.serving.inference_service import Predictor, render
from airflow_elastic.stages.cronjob import render_cronjob
from airflow_elastic.stages.job import render_job
from airflow_elastic.training.render import render_jobset, render_pytorchjob, render_trainjob
from tests.support import builders
from tests.support.paths import ROOT

PACKAGED = ROOT / "airflow_elastic" / "kube" / "schemas"
UPSTREAM = Path(os.environ.get("AIRFLOW_ELASTIC_UPSTREAM_CRDS", ROOT.parent / "shared" / "k8s" / "crds"))
#: Every packaged file, by the module constant that names it.
FILES = {
    name: getattr(schemas, name)
    for name in (
        "JOBSET",
        "POD_TEMPLATE",
        "BATCH",
        "TRAINJOBS",
        "CLUSTER_TRAINING_RUNTIMES",
        "TRAINING_RUNTIMES",
        "PYTORCHJOBS",
        "INFERENCESERVICES",
        "RAYJOBS",
        "RAYCLUSTERS",
    )
}
CRDS = (schemas.TRAINJOBS, schemas.CLUSTER_TRAINING_RUNTIMES, schemas.TRAINING_RUNTIMES, schemas.PYTORCHJOBS)
CRDS += (schemas.INFERENCESERVICES, schemas.RAYJOBS, schemas.RAYCLUSTERS)
REF = "#/components/schemas/"


def walk(node: Any) -> Iterator[tuple[str, Any]]:
    """Every ``(key, value)`` of every mapping in ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


def test_every_packaged_schema_parses_is_named_and_carries_no_upstream_prose():
    assert {path.name for path in PACKAGED.glob("*.json")} == set(FILES.values())
    for file in FILES.values():
        schema = schemas.load(file)
        assert isinstance(schema, dict) and schema, file
        assert not [key for key, _ in walk(schema) if key in ("description", "example")], file
        refs = {value[len(REF) :] for key, value in walk(schema) if key == "$ref"}
        assert refs <= set(schema.get("components", {}).get("schemas", {})), f"{file}: dangling $ref"
    assert "replicatedJobs" in schemas.load(schemas.JOBSET)["properties"]["spec"]["properties"]
    assert {"containers", "volumes"} <= schemas.core_v1_fields("PodSpec")
    cronjob = schemas.batch_v1("CronJob")
    assert "jobTemplate" in cronjob["components"]["schemas"]["io.k8s.api.batch.v1.CronJobSpec"]["properties"]


# ---------------------------------------------------------------------------------- what the renderers emit


def undeclared(value: Any, schema: dict[str, Any], doc: dict[str, Any], path: str) -> Iterator[str]:
    """Paths in ``value`` that ``schema`` (within ``doc``, for ``$ref``) does not declare: what a structural API
    server prunes."""
    while "$ref" in schema or (len(schema.get("allOf", ())) == 1 and "properties" not in schema):
        ref = schema.get("$ref") or schema["allOf"][0]["$ref"]
        schema = doc["components"]["schemas"][ref[len(REF) :]]
    if schema.get("x-kubernetes-preserve-unknown-fields") or schema.get("x-kubernetes-int-or-string"):
        return
    if isinstance(value, dict):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if properties is not None and key in properties:
                yield from undeclared(item, properties[key], doc, f"{path}.{key}")
            elif isinstance(extra, dict):
                yield from undeclared(item, extra, doc, f"{path}.{key}")
            elif extra is not True:
                yield f"{path}.{key}"
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            yield from undeclared(item, schema["items"], doc, f"{path}[{i}]")


#: One role (the TrainJob and PyTorchJob renderers take one) with what the renderers map to most fields.
ONE_ROLE = {
    "roles": [Role("trainer", replicas=2, command=["python", "train.py"], resources=Resources(cpu="2", gpu=1))],
    "env": {"A": "1"},
}
PLACED = Placement(node_selector={"pool": "gpu"}, priority_class="batch", spot=True)


STAGE = BatchStage(
    "prepare",
    image="python:3.12",
    command=["python", "-m", "prep"],
    resources=Resources(cpu="1", memory="1Gi"),
    placement=Placement(node_selector={"pool": "cpu"}, queue="cpu-queue"),
    parallelism=2,
    completions=4,
)


def rendered() -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """``(what, manifest, schema document)`` for each kind the package renders (the golden JobSets included)."""
    import yaml

    crd = schemas.load
    for golden in sorted((ROOT / "tests" / "data" / "golden").glob("*.yaml")):
        yield golden.name, yaml.safe_load(golden.read_text()), crd(schemas.JOBSET)
    yield (
        "jobset",
        render_jobset(
            builders.group(**ONE_ROLE, placement=PLACED), name="train-abc", namespace="ml", labels={"a/b": "c"}
        ),
        crd(schemas.JOBSET),
    )
    yield (
        "trainjob",
        render_trainjob(
            builders.group(**ONE_ROLE, placement=Placement(node_selector={"pool": "gpu"})),
            name="train-abc",
            labels={"a/b": "c"},
        ),
        crd(schemas.TRAINJOBS),
    )
    yield (
        "pytorchjob",
        render_pytorchjob(
            builders.group(**ONE_ROLE, placement=PLACED), name="train-abc", ttl_seconds_after_finished=60
        ),
        crd(schemas.PYTORCHJOBS),
    )
    yield "job", render_job(STAGE, name="prepare-abc", labels={"a/b": "c"}), schemas.batch_v1("Job")
    yield "cronjob", render_cronjob(STAGE, "0 2 * * *", time_zone="Europe/Paris"), schemas.batch_v1("CronJob")
    for predictor in (
        Predictor(model_format="pytorch", min_replicas=1, max_replicas=3, scale_metric="cpu", scale_target=70),
        Predictor(image="server:1", command=["serve"], args=["--port", "8080"]),
        Predictor(model_format="sklearn", mode="Knative", canary_percent=10, scale_metric="rps", scale_target=5),
    ):
        manifest = render("digits", "serving", "s3://models/digits/v1", predictor)
        yield f"inferenceservice {predictor.mode}", manifest, crd(schemas.INFERENCESERVICES)
    ray = RayCluster(
        "tune",
        head=RayHead(resources=Resources(cpu="2"), ray_start_params={"num-cpus": 0}),
        worker_groups=[WorkerGroup("spot", 2, 1, 4, Resources(cpu="4", gpu=1), PLACED, {"object-store-memory": 10**9})],
        env={"A": "1"},
        runtime_env={"pip": ["optuna"]},
    )
    job = RayJob(ray, "python tune.py", submitter=Resources(cpu="1"), active_deadline_seconds=60, queue="q")
    yield "rayjob", render_rayjob(job, name="tune-abc", labels={"a/b": "c"}), crd(schemas.RAYJOBS)
    cluster = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "tune"}}
    yield "raycluster", {**cluster, "spec": render_cluster_spec(ray, labels={"a/b": "c"})}, crd(schemas.RAYCLUSTERS)


def test_the_packaged_schemas_declare_every_field_the_renderers_emit():
    seen = set()
    for what, manifest, doc in rendered():
        seen.add(manifest["kind"])
        root = doc if "$ref" in doc else {**doc, "properties": {**doc["properties"], "metadata": {"type": "object"}}}
        body = {k: v for k, v in manifest.items() if k != "metadata"}  # ObjectMeta is the API server's own
        assert not list(undeclared(body, root, doc, manifest["kind"].lower())), what
    assert seen == {"JobSet", "TrainJob", "PyTorchJob", "Job", "CronJob", "InferenceService", "RayJob", "RayCluster"}


def test_undeclared_finds_what_a_server_would_prune():
    doc = schemas.batch_v1("Job")
    job = render_job(STAGE)
    job["spec"]["template"]["spec"]["containers"][0]["enviroment"] = []  # a typo
    job["spec"]["backofLimit"] = 3
    found = sorted(undeclared({k: v for k, v in job.items() if k != "metadata"}, doc, doc, "job"))
    assert found == ["job.spec.backofLimit", "job.spec.template.spec.containers[0].enviroment"]


# ------------------------------------------------------------------------------------ what the generator writes


def generate(crds: Path, tmp_path: Path) -> Path:
    """Run ``tools/gen_schemas.py`` on ``crds`` in a copy of the repository's layout; its output folder."""
    copy = tmp_path / "repo"
    (copy / "airflow_elastic" / "kube" / "schemas").mkdir(parents=True)
    (copy / "tools").mkdir()
    (copy / "tools" / "gen_schemas.py").write_text((ROOT / "tools" / "gen_schemas.py").read_text())
    subprocess.run(
        [sys.executable, str(copy / "tools" / "gen_schemas.py"), "--crds", str(crds)], check=True, capture_output=True
    )
    return copy / "airflow_elastic" / "kube" / "schemas"


def with_prose(node: Any) -> Any:
    """``node`` with upstream-style ``description`` prose on every schema object (what the generator strips)."""
    if isinstance(node, dict):
        return {**{k: with_prose(v) for k, v in node.items()}, "description": "upstream prose"}
    if isinstance(node, list):
        return [with_prose(v) for v in node]
    return node


def crd(schema: dict[str, Any], file: str) -> dict[str, Any]:
    """A CRD as upstream ships it, whose served version's schema is ``schema``, named as ``file`` says."""
    group, version, plural = file.removesuffix(".json").split("_")
    unserved = {"name": "v0", "served": False, "schema": {"openAPIV3Schema": {"type": "object"}}}
    served = {"name": version, "served": True, "storage": True, "schema": {"openAPIV3Schema": with_prose(schema)}}
    names = {"plural": plural, "kind": plural.title()}
    return {
        "kind": "CustomResourceDefinition",
        "spec": {"group": group, "names": names, "versions": [unserved, served]},
    }


def openapi(components: dict[str, Any]) -> dict[str, Any]:
    """An OpenAPI document holding ``components`` with prose, plus a component nothing the generator keeps refers to."""
    unreferenced = {"io.k8s.api.core.v1.Unreferenced": {"type": "object", "properties": {"x": {"type": "string"}}}}
    return {"openapi": "3.0.0", "components": {"schemas": with_prose({**components, **unreferenced})}}


def test_the_generator_writes_the_packaged_schemas_back_from_upstream_shaped_inputs(tmp_path: Path):
    inputs = tmp_path / "crds"
    inputs.mkdir()
    write = lambda name, doc: (inputs / name).write_text(json.dumps(doc))  # noqa: E731 - JSON is YAML too
    jobset = crd(schemas.load(schemas.JOBSET), "jobset.x-k8s.io_v1alpha2_jobsets.json")
    jobset["spec"]["versions"][1]["served"] = jobset["spec"]["versions"][0]["served"] = True  # picked by name
    write("jobset.x-k8s.io_jobsets.yaml", jobset)
    write("k8s-1.35_api__v1_openapi.json", openapi(schemas.load(schemas.POD_TEMPLATE)["components"]["schemas"]))
    write("k8s-1.35_apis__batch__v1_openapi.json", openapi(schemas.load(schemas.BATCH)["components"]["schemas"]))
    for file in CRDS:
        group, _, plural = file.removesuffix(".json").split("_")
        write(f"{group}_{plural}.yaml", crd(schemas.load(file), file))
    out = generate(inputs, tmp_path)
    assert sorted(path.name for path in out.glob("*.json")) == sorted(FILES.values())
    for file in FILES.values():
        assert (out / file).read_text() == (PACKAGED / file).read_text(), f"{file} is not in the generator's form"


@pytest.mark.skipif(
    not UPSTREAM.is_dir(), reason=f"no upstream CRD copies at {UPSTREAM} (AIRFLOW_ELASTIC_UPSTREAM_CRDS)"
)
def test_regeneration_from_the_upstream_copies_matches(tmp_path: Path):
    # Upstream copies missing from the folder (KubeRay's, added after it was filled) are stood in for by
    # upstream-shaped inputs built from the packaged files; every file with an upstream copy is compared.
    inputs = tmp_path / "crds"
    inputs.mkdir()
    for path in UPSTREAM.iterdir():
        (inputs / path.name).symlink_to(path.resolve())
    stood_in = set()
    for file in CRDS:
        group, _, plural = file.removesuffix(".json").split("_")
        if not (inputs / f"{group}_{plural}.yaml").exists():
            (inputs / f"{group}_{plural}.yaml").write_text(json.dumps(crd(schemas.load(file), file)))
            stood_in.add(file)
    out = generate(inputs, tmp_path)
    for file in set(FILES.values()) - stood_in:
        assert (out / file).read_text() == (PACKAGED / file).read_text(), f"{file} is stale: make schemas"
