"""The InferenceService body, its merge patches and the argument rules
(``airflow_elastic.serving.inference_service``)."""

from __future__ import annotations

import pytest

from airflow_elastic.kube import schemas
from airflow_elastic.serving import inference_service as serving
from airflow_elastic.training.spec import SpecError
from tests.support.serving_objects import isvc

PYTORCH = serving.Predictor(model_format="pytorch", min_replicas=1, max_replicas=4, scale_metric="cpu", scale_target=70)


def test_the_body_always_names_the_mode_and_is_valid_against_the_crd():
    import jsonschema

    body = serving.render("digits", "ns", "gs://b/m", PYTORCH)
    assert body["metadata"]["annotations"] == {serving.MODE_ANNOTATION: "Standard"}
    assert body["spec"]["predictor"] == {
        "model": {"modelFormat": {"name": "pytorch"}, "storageUri": "gs://b/m"},
        "minReplicas": 1,
        "maxReplicas": 4,
        "scaleMetric": "cpu",
        "scaleTarget": 70,
    }
    jsonschema.validate(body, schemas.load(schemas.INFERENCESERVICES))


def test_a_custom_container_gets_the_uri_as_storage_uri():
    custom = serving.Predictor(image="me/server:1", command=["python", "serve.py"])
    body = serving.render("digits", "ns", "s3://b/m", custom)
    (container,) = body["spec"]["predictor"]["containers"]
    assert container["name"] == "kserve-container" and container["env"] == [
        {"name": "STORAGE_URI", "value": "s3://b/m"}
    ]
    assert serving.storage_uri_of(body) == "s3://b/m"


@pytest.mark.parametrize(
    ("kwargs", "field", "says"),
    [
        ({"model_format": "pytorch", "canary_percent": 10}, "canary_percent", "silently"),
        ({}, "model_format", "exactly one"),
        ({"model_format": "pytorch", "image": "x"}, "model_format", "exactly one"),
        ({"model_format": "pytorch", "scale_metric": "rps"}, "scale_metric", "Knative"),
        ({"model_format": "pytorch", "min_replicas": 3, "max_replicas": 2}, "max_replicas", ">= min_replicas"),
        ({"model_format": "pytorch", "min_replicas": 0}, "min_replicas", "scale to zero"),
        ({"model_format": "pytorch", "scale_target": 150}, "scale_target", "percentage"),
        ({"model_format": "pytorch", "mode": "Serverlesss"}, "mode", "Standard, Knative"),
    ],
)
def test_bad_arguments_are_refused_with_the_reason(kwargs, field, says):
    with pytest.raises(SpecError) as refused:
        serving.Predictor(**kwargs)
    assert any(path == field and says in message for path, message in refused.value.problems), refused.value


def test_knative_takes_a_canary_and_legacy_mode_names_are_mapped():
    canary = serving.Predictor(model_format="pytorch", canary_percent=10, mode="Serverless")
    assert canary.mode == "Knative" and canary.model("u")["canaryTrafficPercent"] == 10


@pytest.mark.parametrize("name", ["Digits", "1digits", "digits-", "d" * 54, "dig_its"])
def test_names_kserve_refuses_are_refused(name):
    assert serving.name_problems(name)


def test_a_stored_service_with_the_same_spec_needs_no_write():
    stored = isvc("gs://b/m")
    stored["spec"]["predictor"]["model"]["runtime"] = "kserve-torchserve"  # defaulted by the webhook: not ours
    assert serving.update_patch(stored, "gs://b/m", serving.Predictor(model_format="pytorch")) is None


def test_a_new_uri_is_a_merge_patch_of_only_what_changed():
    stored = isvc("gs://b/v1")
    patch = serving.update_patch(stored, "gs://b/v2", PYTORCH)
    assert patch == {
        "spec": {
            "predictor": {
                "model": {"modelFormat": {"name": "pytorch"}, "storageUri": "gs://b/v2"},
                "maxReplicas": 4,
                "scaleMetric": "cpu",
                "scaleTarget": 70,
            }
        }
    }


def test_switching_to_a_custom_container_clears_the_model():
    patch = serving.update_patch(isvc("gs://b/v1"), "gs://b/v1", serving.Predictor(image="me/server:1"))
    assert patch["spec"]["predictor"]["model"] is None and patch["spec"]["predictor"]["containers"]


def test_a_mode_change_is_refused_before_kserve_rejects_it():
    with pytest.raises(SpecError, match="served in Knative mode"):
        serving.update_patch(isvc(mode="Knative"), "gs://b/v2", PYTORCH)


def test_scaling_patches_only_the_bounds_that_differ():
    stored = isvc()
    stored["spec"]["predictor"].update(minReplicas=1, maxReplicas=4)
    assert serving.scale_patch(stored, 1, 4) == (None, {})
    patch, changed = serving.scale_patch(stored, 3, 4)
    assert patch == {"spec": {"predictor": {"minReplicas": 3}}} and changed == {"min_replicas": (1, 3)}
    assert serving.scale_problems(None, None) and serving.scale_problems(0, 2) and serving.scale_problems(3, 2)


@pytest.mark.parametrize(
    ("request_", "protocol"), [({"instances": [[0.0]]}, "v1"), ({"inputs": [{"name": "x", "data": [1]}]}, "v2")]
)
def test_the_smoke_request_names_its_protocol(request_, protocol):
    assert serving.smoke_protocol(request_) == protocol
    with pytest.raises(SpecError, match="smoke_request"):
        serving.smoke_protocol({"rows": []})


@pytest.mark.parametrize(
    ("reply", "classes"),
    [
        ({"predictions": [[0.1, 2.5, -1.0], [3, 0, 1]]}, [1, 0]),  # v1: a row of logits per instance
        ({"outputs": [{"name": "o", "shape": [2, 3], "datatype": "FP32", "data": [0, 1, 9, 5, 1, 0]}]}, [2, 0]),
        ({"outputs": [{"name": "o", "shape": [1, 2], "data": [[0.2, 0.8]]}]}, [1]),  # v2 with nested data
        ({"predictions": [3, 7]}, None),  # already classes
        ({"predictions": [[4.0]]}, None),  # one score per row: a regression, not classes
        ({"predictions": [[1, "a"]]}, None),
        ({"outputs": [{"shape": [2, 3], "data": [1, 2]}]}, None),  # data does not fill the shape
        ("not json", None),
    ],
)
def test_a_smoke_reply_of_score_rows_gives_the_predicted_class_of_each_row(reply, classes):
    assert serving.predicted_classes(reply) == classes
