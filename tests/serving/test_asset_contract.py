"""The pipelines' Asset contract (docs/concepts/assets.md): static logical URIs, and the extra a promotion's event
carries."""

from __future__ import annotations

import pytest

from airflow_elastic.serving import publishing
from airflow_elastic.serving.publishing import decide


def test_an_asset_uri_names_the_artefact_by_its_place_in_the_layout():
    assert publishing.asset_uri("nightly_training", "models/digits/latest") == (
        "x-airflow-elastic://nightly_training/models/digits/latest"
    )
    assert (
        publishing.asset_uri("nightly_training", "/data/digits/") == "x-airflow-elastic://nightly_training/data/digits"
    )


@pytest.mark.parametrize(
    ("pipeline", "path"),
    [("", "models"), ("nightly", ""), ("nightly", "models//digits"), ("night ly", "m"), ("n", "../m"), ("n", "a/{x}")],
)
def test_an_asset_uri_with_an_unusable_part_is_refused(pipeline, path):
    with pytest.raises(ValueError, match="bad asset URI part"):
        publishing.asset_uri(pipeline, path)


def test_airflow_keeps_the_asset_uri_as_written():
    asset = pytest.importorskip("airflow.sdk").Asset
    uri = publishing.asset_uri("nightly_training", "models/digits/latest")
    assert asset(name="m", uri=uri).uri == uri


def test_a_location_becomes_a_uri():
    assert publishing.location_uri("/srv/nightly/models/digits/v1") == "file:///srv/nightly/models/digits/v1"
    assert publishing.location_uri("gs://bucket/nightly/models") == "gs://bucket/nightly/models"
    with pytest.raises(ValueError, match="absolute"):
        publishing.location_uri("relative/path")


def report(candidate: float, incumbent: float | None) -> dict:
    promotion = decide(
        {"test_accuracy": candidate},
        None if incumbent is None else {"test_accuracy": incumbent},
        metric="test_accuracy",
    )
    return publishing.run_report(
        run_id="manual__1",
        version="manual__1",
        sweep={},
        train={},
        evaluation={"test_accuracy": candidate, "test_loss": 0.2, "checkpoint": "/c/step-3"},
        promotion=promotion,
        objective="val_loss",
        locations={
            "version": "/m/manual__1",
            "model": "/m/manual__1/model",
            "checkpoint": "/m/manual__1/checkpoint",
            "checkpoints": "/c/manual__1/final",
            "latest": "/m/latest",
        },
    )


def test_a_promotion_event_carries_the_version_its_locations_and_the_comparison():
    extra = publishing.model_event_extra(report(0.97, 0.95), data="gs://b/data/digits/manual__1")
    assert extra == {
        "version": "manual__1",
        "run_id": "manual__1",
        "uri": "file:///m/manual__1",
        "model": "file:///m/manual__1/model",
        "checkpoint": "file:///m/manual__1/checkpoint",
        "checkpoints": "file:///c/manual__1/final",
        "data": "gs://b/data/digits/manual__1",
        "latest": "file:///m/latest",
        "metric": "test_accuracy",
        "value": 0.97,
        "previous_value": 0.95,
        "reason": extra["reason"],
        "approved_by": None,  # promoted by the rule, not by a person
        "test": {"test_accuracy": 0.97, "test_loss": 0.2},  # numbers only
    }
    assert "does not regress" in extra["reason"]
    first = publishing.model_event_extra(report(0.9, None))
    assert first["previous_value"] is None and first["data"] is None


def test_a_refused_version_has_no_event():
    with pytest.raises(ValueError, match="not promoted"):
        publishing.model_event_extra(report(0.90, 0.95))
