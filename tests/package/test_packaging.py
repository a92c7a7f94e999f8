"""The built wheel is a working Airflow provider: installed into a clean virtualenv (dependencies pinned by
constraints.txt), Airflow lists it, and it carries its schemas and typing marker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests.support.paths import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.airflow]  # `airflow providers list` in a fresh virtualenv


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (found,) = out.glob("airflow_elastic-*.whl")
    return found


def test_wheel_contents(wheel: Path):
    names = zipfile.ZipFile(wheel).namelist()
    assert "airflow_elastic/py.typed" in names
    assert "airflow_elastic/kube/schemas/jobset.x-k8s.io_v1alpha2.json" in names
    assert "airflow_elastic/kube/schemas/core_v1_podtemplatespec.json" in names
    (entry_points,) = [n for n in names if n.endswith("entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[apache_airflow_provider]" in text and "airflow_elastic.get_provider_info:get_provider_info" in text


def test_airflow_lists_the_installed_provider(wheel: Path, tmp_path: Path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "-c", str(ROOT / "constraints.txt"), str(wheel)],
        check=True,
        capture_output=True,
        timeout=900,
    )
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    out = subprocess.run(
        [str(env_dir / "bin" / "airflow"), "providers", "list", "--output", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    providers = {p["package_name"]: p for p in json.loads(out.stdout)}
    assert providers["airflow-elastic"]["version"] == "0.1.0"
    # The installed package, not this checkout, is what Airflow found.
    where = subprocess.run(
        [str(python), "-c", "import airflow_elastic, sys; print(airflow_elastic.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert str(env_dir) in where.stdout
