"""The packaged schemas are exactly what tools/gen_schemas.py makes from the upstream copies."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from airflow_elastic.kube import schemas
from tests.conftest import ROOT, SHARED


def test_packaged_schemas_have_no_upstream_prose():
    for name in (schemas.JOBSET, schemas.POD_TEMPLATE, schemas.BATCH):
        text = (ROOT / "airflow_elastic" / "kube" / "schemas" / name).read_text()
        assert '"description"' not in text
    assert "replicatedJobs" in schemas.load(schemas.JOBSET)["properties"]["spec"]["properties"]
    assert {"containers", "volumes"} <= schemas.core_v1_fields("PodSpec")
    cronjob = schemas.batch_v1("CronJob")
    assert "jobTemplate" in cronjob["components"]["schemas"]["io.k8s.api.batch.v1.CronJobSpec"]["properties"]


@pytest.mark.skipif(
    not (SHARED / "k8s" / "crds").is_dir(), reason="upstream CRD copies (../shared) are not beside this clone"
)
def test_regeneration_matches(tmp_path: Path):
    copy = tmp_path / "repo"
    (copy / "airflow_elastic" / "kube" / "schemas").mkdir(parents=True)
    (copy / "tools").mkdir()
    (copy / "tools" / "gen_schemas.py").write_text((ROOT / "tools" / "gen_schemas.py").read_text())
    subprocess.run(
        [sys.executable, str(copy / "tools" / "gen_schemas.py"), "--crds", str(SHARED / "k8s" / "crds")],
        check=True,
        capture_output=True,
    )
    for name in (schemas.JOBSET, schemas.POD_TEMPLATE, schemas.BATCH):
        fresh = (copy / "airflow_elastic" / "kube" / "schemas" / name).read_text()
        assert fresh == (ROOT / "airflow_elastic" / "kube" / "schemas" / name).read_text(), (
            f"{name} is stale: make schemas"
        )
