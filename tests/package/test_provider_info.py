"""``get_provider_info`` advertises only what exists: every module imports and holds the kind of class it is listed
under, the metadata passes Airflow's provider schema, and each claim of the description names real code."""

from __future__ import annotations

import importlib
import inspect
import json
from pathlib import Path

import airflow
import jsonschema
import pytest
from airflow.sdk import BaseHook, BaseOperator, BaseSensorOperator
from airflow.triggers.base import BaseTrigger

from airflow_elastic.get_provider_info import get_provider_info
from tests.conftest import ROOT

INFO = get_provider_info()
KINDS = {"operators": BaseOperator, "sensors": BaseSensorOperator, "triggers": BaseTrigger, "hooks": BaseHook}
#: Each comma-separated claim of the description, and an object that implements it.
CLAIMS = {
    "training groups": "airflow_elastic.training.spec:TrainingGroup",
    "batch stages": "airflow_elastic.stages.spec:BatchStage",
    "preemption classification": "airflow_elastic.preemption.classify:classify",
    "checkpoint resume": "airflow_elastic.contract.checkpoints:latest_complete",
    "model publishing to KServe": "airflow_elastic.operators.serving.inference_service:InferenceServiceOperator",
    "an embedded local cluster": "airflow_elastic.localcluster:LocalCluster",
}
MODULES = [(kind, module) for kind in KINDS for entry in INFO.get(kind, []) for module in entry["python-modules"]]


def test_the_metadata_passes_airflows_provider_schema():
    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(INFO, schema)


@pytest.mark.parametrize(("kind", "module"), MODULES, ids=[m for _, m in MODULES])
def test_every_advertised_module_holds_its_kind_of_class(kind: str, module: str):
    loaded = importlib.import_module(module)
    own = [c for _, c in inspect.getmembers(loaded, inspect.isclass) if c.__module__ == module]
    assert any(issubclass(c, KINDS[kind]) for c in own), f"{module} (listed under {kind}) defines no {KINDS[kind]}"


def test_every_section_names_a_declared_integration():
    declared = {i["integration-name"] for i in INFO["integrations"]}
    used = {entry["integration-name"] for kind in KINDS for entry in INFO.get(kind, [])}
    assert used <= declared and declared <= used


def test_each_claim_of_the_description_names_real_code():
    what = INFO["description"].split(": ", 1)[1].rstrip(".")
    claims = [c.strip() for part in what.split(", ") for c in part.split(" and ")]
    assert claims == list(CLAIMS), f"description claims {claims}; map each to its code in CLAIMS"
    for target in CLAIMS.values():
        module, name = target.split(":")
        assert hasattr(importlib.import_module(module), name), target


def test_every_registered_extra_link_is_an_operator_link_and_every_link_is_registered():
    from airflow.sdk import BaseOperatorLink

    from airflow_elastic.operators.links import LINKS

    registered = INFO["extra-links"]
    for path in registered:
        module, _, name = path.rpartition(".")
        assert issubclass(getattr(importlib.import_module(module), name), BaseOperatorLink), path
    assert registered == [f"{link.__module__}.{link.__name__}" for link in LINKS]


def test_every_how_to_guide_exists_and_every_how_to_page_is_advertised():
    """The how-to pages the integrations advertise are the docs site's, all of them, each under one integration."""
    guides = [guide for i in INFO["integrations"] for guide in i.get("how-to-guide", [])]
    missing = [g for g in guides if not (ROOT / g.lstrip("/")).is_file()]
    assert not missing, f"advertised how-to guides that do not exist: {missing}"
    pages = sorted(f"/{p.relative_to(ROOT)}" for p in (ROOT / "docs" / "howto").glob("*.md"))
    assert sorted(guides) == pages, f"advertised {sorted(guides)}, docs/howto has {pages}"
