"""What a task read and wrote, as OpenLineage datasets (``airflow_elastic.lineage.datasets``): pure decisions from
locations, the group's checkpoint and a stage's ``outlet_extra``."""

from __future__ import annotations

import pytest

from airflow_elastic import Checkpointing
from airflow_elastic.lineage.datasets import (
    Dataset,
    Lineage,
    dataset,
    location_problems,
    stage_lineage,
    training_lineage,
)
from tests.support.builders import group


@pytest.mark.parametrize(
    ("location", "namespace", "name"),
    [
        ("/srv/night/data/digits/v1", "file", "/srv/night/data/digits/v1"),
        ("/srv/night/data/digits/v1/", "file", "/srv/night/data/digits/v1"),  # a trailing / is the same dataset
        ("file:///srv/night/data", "file", "/srv/night/data"),
        ("file://nas/srv/data", "file://nas", "/srv/data"),
        ("s3://bucket/night/data/v1", "s3://bucket", "night/data/v1"),  # the object key: no leading /
        ("s3a://bucket/night/data/v1/", "s3://bucket", "night/data/v1"),
        ("gs://bucket/night/models/v1/model", "gs://bucket", "night/models/v1/model"),
        ("gcs://bucket/x", "gs://bucket", "x"),
        ("gs://bucket", "gs://bucket", "/"),
        ("abfss://c@acct.dfs.core.windows.net/night/d", "abfss://c@acct.dfs.core.windows.net", "night/d"),
        ("hdfs://namenode:8020/night/d", "hdfs://namenode:8020", "/night/d"),
        (" /srv/a/../b ", "file", "/srv/b"),
    ],
)
def test_a_location_is_named_as_openlineage_names_file_and_object_storage(location, namespace, name):
    assert dataset(location) == Dataset(namespace, name)


@pytest.mark.parametrize("location", ["", "  ", "data/digits", "file:relative", "s3:///key", 3])
def test_what_names_no_place_is_refused(location):
    with pytest.raises(ValueError):
        dataset(location)


def test_the_arguments_are_lists_of_locations_and_templates_wait_for_rendering():
    assert location_problems("lineage_inputs", ["/d", "gs://b/x", "{{ params.root }}/data"]) == []
    assert location_problems("lineage_inputs", []) == []
    [(field, message)] = location_problems("lineage_inputs", "/d")
    assert field == "lineage_inputs" and "list" in message
    problems = location_problems("lineage_outputs", ["/ok", "relative/path", None])
    assert [field for field, _ in problems] == ["lineage_outputs[1]", "lineage_outputs[2]"]


def test_a_training_writes_its_checkpoint_directory_besides_what_it_declares():
    trained = group(checkpoint=Checkpointing(uri="gs://bucket/ckpt/v1/final"))
    lineage = training_lineage(trained, ["gs://bucket/data/v1"], ["gs://bucket/exports/v1"])
    assert lineage == Lineage(
        inputs=(Dataset("gs://bucket", "data/v1"),),
        outputs=(Dataset("gs://bucket", "exports/v1"), Dataset("gs://bucket", "ckpt/v1/final")),
    )
    assert training_lineage(group(), ["/d"], []) == Lineage((Dataset("file", "/d"),), ())  # no checkpointing
    assert training_lineage(None, [], []) == Lineage()  # a JobSet manifest: only what the DAG declares


def test_a_stage_writes_the_uri_of_the_asset_it_produced_and_each_dataset_is_reported_once():
    lineage = stage_lineage(["/d/raw", "/d/raw/"], ["/d/split"], {"uri": "file:///d/split", "version": "v1"})
    assert lineage == Lineage((Dataset("file", "/d/raw"),), (Dataset("file", "/d/split"),))
    assert stage_lineage([], [], {"uri": "", "metrics": {}}) == Lineage()
    assert stage_lineage([], [], {"uri": 3}) == Lineage()  # not a location: an extra of the DAG's own


def test_a_failed_try_reports_what_it_read_not_what_it_may_have_partly_written():
    lineage = Lineage((Dataset("file", "/in"),), (Dataset("file", "/out"),))
    assert lineage.on_failure() == Lineage((Dataset("file", "/in"),), ())
