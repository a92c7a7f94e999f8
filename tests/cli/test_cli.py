"""``airflow-elastic render``: YAML of the groups a file defines; one clear line and exit 1 on errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.paths import ROOT

CLI = Path(sys.executable).parent / "airflow-elastic"


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, cwd=cwd, timeout=60)


def test_renders_every_group_of_a_file():
    out = run("render", "dags/example_groups.py")
    assert out.returncode == 0, out.stderr
    docs = list(yaml.safe_load_all(out.stdout))
    assert [d["metadata"]["name"] for d in docs] == ["llm-finetune", "tiny-trainer", "cpu-smoke"]
    assert all(d["kind"] == "JobSet" for d in docs)


def test_group_and_namespace_options():
    out = run("render", "dags/example_groups.py", "--group", "cpu-smoke", "--namespace", "ml")
    (doc,) = yaml.safe_load_all(out.stdout)
    assert (doc["metadata"]["name"], doc["metadata"]["namespace"]) == ("cpu-smoke", "ml")


def test_finds_groups_held_by_operators_and_imports_neighbours(tmp_path: Path):
    (tmp_path / "shared_groups.py").write_text(
        "from airflow_elastic import Role, TrainingGroup\nG = TrainingGroup('nb', [Role('a')], image='x')\n"
    )
    (tmp_path / "dag.py").write_text(
        "from shared_groups import G\nclass Op:\n    def __init__(self, group): self.group = group\nop = Op(G)\n"
    )
    out = run("render", str(tmp_path / "dag.py"))
    assert out.returncode == 0, out.stderr
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(out.stdout)] == ["nb"]


def test_renders_batch_stages_beside_groups(tmp_path: Path):
    (tmp_path / "dag.py").write_text(
        "from airflow_elastic import BatchStage, Role, TrainingGroup\n"
        "G = TrainingGroup('train', [Role('a')], image='x')\n"
        "class Op:\n    def __init__(self, stage): self.stage = stage\n"
        "op = Op(BatchStage('prepare', image='x', command=['true'], completions=2, parallelism=2))\n"
    )
    out = run("render", str(tmp_path / "dag.py"))
    assert out.returncode == 0, out.stderr
    docs = list(yaml.safe_load_all(out.stdout))
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [("JobSet", "train"), ("Job", "prepare")]
    assert docs[1]["spec"]["completionMode"] == "Indexed"
    out = run("render", str(tmp_path / "dag.py"), "--group", "prepare")
    assert [d["kind"] for d in yaml.safe_load_all(out.stdout)] == ["Job"]


def test_renders_ray_jobs_as_kuberay_rayjobs(tmp_path: Path):
    (tmp_path / "dag.py").write_text(
        "from airflow_elastic import Placement\n"
        "from airflow_elastic.ray import RayCluster, RayJob, WorkerGroup\n"
        "cluster = RayCluster('tune', worker_groups=[WorkerGroup('spot', 2, placement=Placement(spot=True))])\n"
        "JOB = RayJob(cluster, 'python tune.py')\n"
    )
    out = run("render", str(tmp_path / "dag.py"), "--namespace", "ml")
    assert out.returncode == 0, out.stderr
    (doc,) = yaml.safe_load_all(out.stdout)
    assert (doc["apiVersion"], doc["kind"], doc["metadata"]["name"]) == ("ray.io/v1", "RayJob", "tune")
    assert doc["metadata"]["namespace"] == "ml" and doc["spec"]["entrypoint"] == "python tune.py"
    assert doc["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["groupName"] == "spot"
    (tmp_path / "bad.py").write_text(
        "from airflow_elastic.ray import RayCluster, RayJob\nJOB = RayJob(RayCluster('tune'), '')\n"
    )
    assert "entrypoint: must be a non-empty shell command" in error_line(run("render", str(tmp_path / "bad.py")))


def error_line(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 1 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


def test_missing_file(tmp_path: Path):
    assert "no such file" in error_line(run("render", str(tmp_path / "nope.py")))


def test_file_without_groups(tmp_path: Path):
    (tmp_path / "empty.py").write_text("x = 1\n")
    assert "defines no TrainingGroup" in error_line(run("render", str(tmp_path / "empty.py")))


def test_unknown_group_lists_what_exists():
    line = error_line(run("render", "dags/example_groups.py", "--group", "nope"))
    assert (
        "no training group, batch stage or Ray job named 'nope'" in line
        and "llm-finetune, tiny-trainer, cpu-smoke" in line
    )


def test_spec_error_is_one_line_naming_the_field(tmp_path: Path):
    (tmp_path / "bad.py").write_text(
        "from airflow_elastic import Role, TrainingGroup\n"
        "g = TrainingGroup('t', [Role('leader'), Role('Worker', replicas=0)], image='x')\n"
    )
    line = error_line(run("render", str(tmp_path / "bad.py")))
    assert "invalid training group" in line
    assert "roles[1].name: 'Worker' must be a DNS-1035 label" in line and "roles[1].replicas" in line


def test_file_that_crashes(tmp_path: Path):
    (tmp_path / "boom.py").write_text("raise RuntimeError('boom')\n")
    assert "failed to load: RuntimeError: boom" in error_line(run("render", str(tmp_path / "boom.py")))


def test_backend_option_renders_a_trainjob_or_pytorchjob_and_names_what_cannot_be_expressed(tmp_path: Path, capsys):
    from airflow_elastic.cli import main  # in-process: the same entry point, without a subprocess per case

    (tmp_path / "dag.py").write_text(
        "from airflow_elastic import Role, TrainingGroup\n"
        "one = TrainingGroup('one', [Role('trainer', replicas=2, command=['python', 't.py'])], image='x')\n"
        "two = TrainingGroup('two', [Role('leader'), Role('worker', replicas=2)], image='x')\n"
    )
    dag = str(tmp_path / "dag.py")
    assert main(["render", dag, "--group", "one", "--backend", "trainjob", "--runtime", "my-torch"]) == 0
    (doc,) = yaml.safe_load_all(capsys.readouterr().out)
    assert (doc["kind"], doc["spec"]["runtimeRef"]["name"], doc["spec"]["trainer"]["numNodes"]) == (
        "TrainJob",
        "my-torch",
        2,
    )
    assert main(["render", dag, "--group", "two", "--backend", "pytorchjob"]) == 0
    (doc,) = yaml.safe_load_all(capsys.readouterr().out)
    assert doc["kind"] == "PyTorchJob" and doc["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    assert main(["render", dag, "--group", "two", "--backend", "trainjob"]) == 1
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1
    assert "group 'two' cannot run as a trainjob: roles: trainjob runs one homogeneous role" in out.err
    assert main(["render", dag, "--backend", "pytorchjob", "--runtime", "x"]) == 1
    assert "--runtime applies to --backend trainjob only" in capsys.readouterr().err
