"""The README and the docs site (docs/) document what the code does (every contract variable, every spot platform,
both quickstart commands, the classification table, the checkpoint arithmetic, the package tree) and cite only
documents the repository contains."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

from airflow_elastic import contract
from airflow_elastic.contract import checkpoints
from airflow_elastic.kube import platforms
from tests.support.paths import ROOT

README = (ROOT / "README.md").read_text()
#: Where the environment contract and the spot platforms are documented.
TRAINING_GROUPS_DOC = ROOT / "docs/concepts/training-groups.md"


def test_quickstart_commands():
    for text in (README, (ROOT / "docs" / "getting-started.md").read_text()):
        assert "make demo" in text and "make test" in text


def test_every_contract_variable_is_documented():
    text = TRAINING_GROUPS_DOC.read_text()
    names = [v for k, v in vars(contract).items() if k.isupper() and isinstance(v, str) and k != "PREFIX"]
    missing = [n for n in names if f"`{n}`" not in text]
    assert not missing, f"{TRAINING_GROUPS_DOC.relative_to(ROOT)} does not document {missing}"


def test_every_spot_platform_is_documented():
    text = TRAINING_GROUPS_DOC.read_text()
    for name, capacity in platforms.SPOT_PLATFORMS.items():
        assert f"`{name}`" in text
        for key, value in capacity.node_selector.items():
            assert f"`{key}={value}`" in text


# ------------------------------------------------------------------------------------------------ docs/

PREEMPTION_DOC = ROOT / "docs" / "preemption.md"
#: Where documents are cited from: everything the repository ships or runs, not the virtualenv or caches.
SCANNED = ("*.py", "*.md", "*.toml", "*.yaml", "*.yml", "*.cfg", "*.txt", "Makefile", "*Dockerfile")
SKIPPED = {
    ".venv",
    ".venv-serving",
    ".venv-ray",
    ".git",
    "__pycache__",
    "build",
    "dist",
    ".pytest_cache",
    ".ruff_cache",
    "_build",
}
URL = re.compile(r"https?://[^\s)\]>`'\"]+")
DOC = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.md)\b(?:#([\w-]+))?")
SECTION = re.compile(r"§\s*(\d+(?:\.\d+)?)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", heading.strip().lower()))


def _headings(path: Path) -> list[str]:
    return [line.lstrip("#").strip() for line in path.read_text().splitlines() if line.startswith("#")]


def _sections(path: Path) -> set[str]:
    """The section numbers of a document's headings (``## 1. Title`` -> ``1``, ``### 1.6 Title`` -> ``1.6``)."""
    return {m.group(1) for h in _headings(path) if (m := re.match(r"(\d+(?:\.\d+)?)\.?\s", h))}


def _repository_files() -> list[Path]:
    found = set()
    for pattern in SCANNED:
        for path in ROOT.rglob(pattern):
            if path.is_file() and not SKIPPED & set(path.relative_to(ROOT).parts):
                found.add(path)
    return sorted(found)


def _resolve(name: str, cited_from: Path) -> Path | None:
    for base in (cited_from.parent, ROOT, ROOT / "docs"):
        if (base / name).is_file():
            return base / name
    return None


def test_every_cited_document_is_in_the_repository():
    """A user has only this repository: a document named in code, tests, docs or the README must be part of it, and
    a cited section (``§1.6``) or anchor must exist in it."""
    missing = []
    for path in _repository_files():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            line = URL.sub("", line)
            for match in DOC.finditer(line):
                where = f"{path.relative_to(ROOT)}:{number}"
                target = _resolve(match.group(1), path)
                if target is None:
                    missing.append(f"{where}: {match.group(1)} does not exist")
                    continue
                if match.group(2) and match.group(2) not in {_slug(h) for h in _headings(target)}:
                    missing.append(f"{where}: {match.group(1)} has no heading #{match.group(2)}")
                rest = line[match.end() :].split(".md", 1)[0]  # the sections cited after this document's name
                absent = sorted(set(SECTION.findall(rest)) - _sections(target))
                if absent:
                    missing.append(f"{where}: {match.group(1)} has no section {', '.join(absent)}")
    assert not missing, "\n".join(missing)


def test_the_classification_table_is_the_rule_table():
    """docs/preemption.md §1.6 lists ``classify.RULES`` in order with each rule's cause and budget."""
    from airflow_elastic.preemption.classify import RULES

    text = PREEMPTION_DOC.read_text().split("### 1.6 ", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines() if line[:3] == "| `"]
    documented = [(rule.strip("`"), cause.strip("`"), budget) for rule, _, cause, budget in rows]
    expected = [(r.name, str(r.cause), str(r.budget)) for r in RULES]
    assert documented == expected, "docs/preemption.md §1.6 must list, in order:\n" + "\n".join(
        f"| `{name}` | <evidence> | `{cause}` | {budget} |" for name, cause, budget in expected
    )


def test_every_rule_cites_a_section_of_the_preemption_doc():
    from airflow_elastic.preemption.classify import RULES

    sections = _sections(PREEMPTION_DOC)
    absent = {r.name: cited for r in RULES if (cited := set(SECTION.findall(r.source)) - sections)}
    assert not absent, f"rules cite sections docs/preemption.md does not have: {absent}"


def test_the_preemption_doc_names_every_spot_platform():
    text = PREEMPTION_DOC.read_text()
    for name, capacity in platforms.SPOT_PLATFORMS.items():
        assert f"(`{name}`)" in text, name
        for key, value in capacity.node_selector.items():
            assert f"`{key}={value}`" in text, (name, key)


def _percent(text: str) -> float:
    return float(text.rstrip(" %"))


def test_the_preemption_doc_numbers_are_the_functions_numbers():
    """§4.2's worked example and §4.3's table, recomputed with ``airflow_elastic.contract.checkpoints``."""
    text = PREEMPTION_DOC.read_text()
    mtbf = checkpoints.group_mtbf(3, 36 * 3600)
    assert round(checkpoints.young_interval(120, mtbf) / 60, 1) == 53.7 and "≈ 53.7 min" in text
    interval, waste = checkpoints.young_daly(120, mtbf, 600)
    assert (round(interval / 60, 1), round(waste * 100, 1)) == (52.3, 8.8)
    assert "≈ 52.3 min" in text and "= 8.8 %" in text
    for minutes, emergency, shown in ((10, False, 22.1), (60, False, 8.9), (60, True, 4.7), (240, True, 2.2)):
        waste = checkpoints.expected_waste(minutes * 60, 120, mtbf, 600, emergency_checkpoint=emergency)
        assert round(waste * 100, 1) == shown and f"{shown} %" in text, (minutes, emergency)
    for published, delta in ((117, 24 * 3600), (57, 6 * 3600), (9.1, 15 * 60)):
        assert round(checkpoints.daly_interval(300, delta) / 60, 1 if published < 10 else 0) == published
    table = text.split("### 4.3 ", 1)[1]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines() if line[:2] == "| "]
    rows = [r for r in rows if r[0].endswith("%")]
    assert len(rows) == 5
    for p, nodes, mtbf_h, tau, at_tau, at_60, notice in rows:
        band = checkpoints.mtbf_from_monthly_band(_percent(p) / 100, int(nodes))
        interval, waste = checkpoints.young_daly(120, band, 600)
        assert round(band / 3600) == int(mtbf_h.replace(",", "").rstrip(" h")), p
        assert round(interval / 60) == int(tau.rstrip(" min")), p
        assert round(waste * 100, 1) == _percent(at_tau), p
        assert round(checkpoints.expected_waste(3600, 120, band, 600) * 100, 1) == _percent(at_60), p
        late = checkpoints.expected_waste(240 * 60, 120, band, 600, emergency_checkpoint=True)
        assert round(late * 100, 1) == _percent(notice), p


def test_every_relative_link_in_the_markdown_resolves():
    """``[text](path)`` links in the README and docs/ point at files of the repository (URLs are not fetched)."""
    broken = []
    for path in [p for p in _repository_files() if p.suffix == ".md"]:
        for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", path.read_text()):
            if not URL.match(target) and not (path.parent / target).exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert not broken, broken


# ------------------------------------------------------------------------------------------------ the package tree

ARCHITECTURE_DOC = ROOT / "docs" / "architecture.md"
TREE = re.compile(r"<!-- package-tree start -->\n(.*)<!-- package-tree end -->", re.S)


def _summary(docstring: str) -> str:
    """A docstring's first sentence (of its first paragraph), as Markdown: ``x`` and :role:`x` become `x`."""
    paragraph = " ".join(docstring.split("\n\n", 1)[0].split())
    sentence = re.split(r"(?<=[.!?])\s", paragraph, maxsplit=1)[0]
    return re.sub(r"(?::\w+:)?``?([^`]+)``?", r"`\1`", sentence).replace("|", "\\|")


def package_tree() -> str:
    """The listing docs/architecture.md shows: every package of ``airflow_elastic`` with its docstring's first
    sentence, from the filesystem."""
    rows = ["| package | what lives there |", "| --- | --- |"]
    for init in sorted(ROOT.glob("airflow_elastic/**/__init__.py"), key=lambda p: p.parent.parts):
        package = ".".join(init.parent.relative_to(ROOT).parts)
        docstring = ast.get_docstring(ast.parse(init.read_text())) or ""
        rows.append(f"| `{package}` | {_summary(docstring)} |")
    return "\n".join(rows) + "\n"


def test_every_package_has_a_docstring():
    missing = [
        str(p.parent.relative_to(ROOT))
        for p in ROOT.glob("airflow_elastic/**/__init__.py")
        if not ast.get_docstring(ast.parse(p.read_text()))
    ]
    assert not missing, f"packages without a docstring saying what lives there: {missing}"


def test_the_architecture_page_lists_the_package_tree():
    """docs/architecture.md's package listing is the code's: a package added, moved, removed or re-described shows
    up here."""
    shown = TREE.search(ARCHITECTURE_DOC.read_text())
    assert shown, "docs/architecture.md has no <!-- package-tree start/end --> markers"
    assert shown.group(1) == package_tree(), "docs/architecture.md's package tree must read:\n" + package_tree()


# ------------------------------------------------------------------------------------------------ module paths

DOTTED = re.compile(r"(?<![\w./])airflow_elastic(?:\.\w+)+")
FILE_PATH = re.compile(r"(?<![\w./])airflow_elastic/[\w/]+(?:\.py|/)")


def _docs_text() -> dict[str, str]:
    """The README and the docs pages, without the architecture page's table of moved (old) module paths."""
    pages = {"README.md": README}
    for path in sorted((ROOT / "docs").rglob("*.md")):
        if "_build" not in path.parts:
            pages[str(path.relative_to(ROOT))] = path.read_text()
    architecture = pages["docs/architecture.md"]
    before, _, rest = architecture.partition("## Moved modules")
    pages["docs/architecture.md"] = before + rest.partition("\n## ")[2]
    return pages


def _resolves(dotted: str) -> bool:
    """``dotted`` is a module under its own (new) name, or a name in one: not an old path kept by the aliases."""
    from airflow_elastic._aliases import MOVED

    parts = dotted.split(".")
    if any(".".join(parts[1 : n + 1]) in MOVED for n in range(1, len(parts))):
        return False  # an old path the aliases keep importing
    target: object = importlib.import_module(parts[0])
    for depth in range(1, len(parts)):
        name = ".".join(parts[: depth + 1])
        if hasattr(target, "__path__") and importlib.util.find_spec(name) is not None:
            target = importlib.import_module(name)
            if target.__name__ != name:
                return False  # an alias of a moved module
        elif hasattr(target, parts[depth]):
            target = getattr(target, parts[depth])
        else:
            return False
    return True


def test_the_docs_show_the_modules_where_they_live():
    """Every ``airflow_elastic.x.y`` the README and docs name imports under that name (the moved modules' old paths
    still import, through the aliases, but the docs show the new ones), unless it is a metric's name (the metrics
    page lists them), and every ``airflow_elastic/x.py`` exists."""
    from airflow_elastic.metering.catalog import CATALOG

    metrics = {m.name for m in CATALOG}
    wrong = []
    for page, text in _docs_text().items():
        dotted = sorted(set(DOTTED.findall(text)) - metrics)
        wrong += [f"{page}: {d}" for d in dotted if not _resolves(d)]
        wrong += [f"{page}: {p}" for p in sorted(set(FILE_PATH.findall(text))) if not (ROOT / p).exists()]
    assert not wrong, "\n".join(wrong)


def test_the_readme_example_builds_its_dag():
    """The README's short example (it cannot include from dags/ on GitHub) runs: the DAG builds, the group validates
    and renders."""
    from airflow_elastic.training.render import render_jobset

    source = README.split("## A short example", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, object] = {}
    exec(compile(source, "README.md", "exec"), namespace)
    assert render_jobset(namespace["group"])["kind"] == "JobSet"
