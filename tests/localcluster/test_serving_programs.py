"""The programs behind the local cluster's built-in KServe images: the storage initializer (copies local models,
fails other schemes as a missing credential does) and how the model server's Python is found."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_elastic.localcluster import images
from airflow_elastic.localcluster.serving import storage_initializer


def test_storage_initializer_program(tmp_path: Path, monkeypatch, capsys):
    source = tmp_path / "model"
    (source / "sub").mkdir(parents=True)
    (source / "model.pt").write_text("weights")
    (source / "sub" / "vocab.txt").write_text("v")
    target = tmp_path / "mounted"
    monkeypatch.setenv("LOCALCLUSTER_MOUNT_MNT_MODELS", str(target))
    assert storage_initializer.main([f"file://{source}", "/mnt/models"]) == 0
    assert (target / "model.pt").read_text() == "weights" and (target / "sub" / "vocab.txt").read_text() == "v"
    assert storage_initializer.main([str(source / "model.pt"), "/mnt/models"]) == 0
    assert storage_initializer.main(["s3://bucket/model", "/mnt/models"]) == 1
    assert "NoCredentialsError: Unable to locate credentials" in capsys.readouterr().err
    assert storage_initializer.main([f"file://{tmp_path}/missing", "/mnt/models"]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_the_serving_python_is_configured_or_found(tmp_path: Path, monkeypatch):
    monkeypatch.setenv(images.SERVING_PYTHON_ENV, "/opt/serving/bin/python")
    assert images.builtin(images.PYTORCH_PREDICTOR)[0] == "/opt/serving/bin/python"
    assert images.builtin(images.PYTORCH_PREDICTOR)[1].endswith("serving/pytorch_server.py")
    assert images.builtin("my/trainer:1") is None
    monkeypatch.delenv(images.SERVING_PYTHON_ENV)
    monkeypatch.setattr(images, "_REPO", tmp_path)
    with pytest.raises(images.ImageUnavailable, match="run `make serving-venv`"):
        images.builtin(images.PYTORCH_PREDICTOR)
    venv = tmp_path / ".venv-serving" / "bin" / "python"
    venv.parent.mkdir(parents=True)
    venv.touch()
    assert images.builtin(images.PYTORCH_PREDICTOR)[0] == str(venv)
