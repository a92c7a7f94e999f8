"""``docker/``: every file an image copies exists in the build context (the repository root), and the priority
classes the examples use are defined in ``docker/k8s``. (No container engine here: the images are not built.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from tests.support.paths import ROOT

DOCKERFILES = sorted((ROOT / "docker").glob("*/Dockerfile"))


def instructions(dockerfile: Path) -> list[tuple[str, list[str]]]:
    """``(INSTRUCTION, arguments)`` per instruction, continuation lines joined, comments dropped."""
    text = re.sub(
        r"\\\n", " ", "\n".join(line for line in dockerfile.read_text().splitlines() if not line.startswith("#"))
    )
    found = []
    for line in text.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            found.append((word.upper(), shlex.split(rest)))
    return found


def copied(dockerfile: Path) -> list[str]:
    """The sources of each ``COPY``/``ADD`` from the build context (not ``--from`` another stage)."""
    sources = []
    for word, args in instructions(dockerfile):
        if word in ("COPY", "ADD") and not any(a.startswith("--from=") for a in args):
            sources += [a for a in args if not a.startswith("--")][:-1]
    return sources


def test_the_images_exist():
    assert [p.parent.name for p in DOCKERFILES] == ["airflow", "predictor", "trainer"]


def test_the_predictor_pins_kserve_and_torch_by_the_serving_constraints():
    runs = [" ".join(a) for word, a in instructions(ROOT / "docker" / "predictor" / "Dockerfile") if word == "RUN"]
    assert any("-c /tmp/constraints-serving.txt" in r and "torch" in r and "kserve" in r for r in runs)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_every_copied_file_exists_in_the_build_context(dockerfile):
    sources = copied(dockerfile)
    assert sources, f"{dockerfile} copies nothing?"
    missing = [s for s in sources if not (ROOT / s).exists()]
    assert not missing, f"{dockerfile.relative_to(ROOT)} copies what the repository lacks: {missing}"


def test_the_copy_parser_sees_what_a_build_would_need(tmp_path):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(
        "# COPY nothing/here /x\nFROM a\nCOPY --chown=a:b one two \\\n  /dest/\nCOPY --from=build /out /x\n"
    )
    assert copied(dockerfile) == ["one", "two"]


def test_the_trainer_installs_the_package_without_its_dependencies_and_pins_torch_by_constraints():
    runs = [" ".join(args) for word, args in instructions(ROOT / "docker" / "trainer" / "Dockerfile") if word == "RUN"]
    assert any("--no-deps /src" in r for r in runs)
    assert any("-c /tmp/constraints.txt" in r and "${TORCH_INDEX}" in r and "torch" in r for r in runs)
    # The digits image runs the nightly final training's torchft trainer and its lighthouse.
    assert any("-c /tmp/constraints.txt" in r and "torchft" in r.split() for r in runs)


def priority_classes() -> set[str]:
    docs = [d for f in sorted((ROOT / "docker" / "k8s").glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    return {d["metadata"]["name"] for d in docs if d.get("kind") == "PriorityClass"}


def test_priority_classes_the_examples_use_are_defined():
    used = set()
    for path in sorted((ROOT / "dags").rglob("*.py")):
        used |= set(re.findall(r"""priority_class\s*=\s*["']([^"']+)["']""", path.read_text()))
    defined = priority_classes()
    assert {"training", "batch-low"} <= defined
    assert used <= defined, f"examples use priority classes docker/k8s does not define: {sorted(used - defined)}"


def test_the_kustomization_lists_every_manifest_here():
    folder = ROOT / "docker" / "k8s"
    listed = yaml.safe_load((folder / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(p.name for p in folder.glob("*.yaml") if p.name != "kustomization.yaml")


def test_every_account_the_rbac_binds_is_created_here():
    folder = ROOT / "docker" / "k8s"
    docs = [d for d in yaml.safe_load_all((folder / "rbac.yaml").read_text()) if d]
    bound = {
        (s["namespace"], s["name"])
        for d in docs
        if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
        for s in d["subjects"]
        if s["kind"] == "ServiceAccount"
    }
    accounts = [d for d in yaml.safe_load_all((folder / "serviceaccounts.yaml").read_text()) if d]
    created = {(a["metadata"]["namespace"], a["metadata"]["name"]) for a in accounts}
    assert {("airflow", "airflow-worker"), ("airflow", "airflow-triggerer"), ("ml", "airflow-elastic-trainer")} <= bound
    assert {b for b in bound if b[1] != "default"} <= created  # every namespace has its `default` account
