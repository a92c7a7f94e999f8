"""The ``airflow-elastic`` command line (pure: the ``render`` command imports neither Airflow nor kubernetes)."""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from collections.abc import Sequence
from pathlib import Path

from airflow_elastic.ray.spec import RayJob
from airflow_elastic.stages.spec import BatchStage
from airflow_elastic.training.backends import BACKENDS
from airflow_elastic.training.spec import SpecError, TrainingGroup


class CliError(Exception):
    """A user error: printed as one line, exit status 1."""


Spec = TrainingGroup | BatchStage | RayJob


def specs_in(path: Path) -> list[Spec]:
    """Training groups, batch stages and Ray jobs a Python file defines at module level, or holds in operators'
    ``group`` or ``stage`` attribute, in definition order and without duplicates."""
    if not path.is_file():
        raise CliError(f"no such file: {path}")
    # Like Airflow's DAG processor, let the file import its neighbours.
    sys.path.insert(0, str(path.resolve().parent))
    try:
        namespace = runpy.run_path(str(path), run_name="__airflow_elastic_render__")
    except SpecError as err:
        raise CliError(f"{path}: invalid training group, batch stage or Ray job: {err}") from err
    except Exception as err:
        raise CliError(f"{path}: failed to load: {type(err).__name__}: {err}") from err
    finally:
        sys.path.remove(str(path.resolve().parent))
    found: list[Spec] = []
    for value in namespace.values():
        for candidate in (value, getattr(value, "group", None), getattr(value, "stage", None)):
            if isinstance(candidate, TrainingGroup | BatchStage | RayJob) and candidate not in found:
                found.append(candidate)
    return found


def groups_in(path: Path) -> list[TrainingGroup]:
    """The training groups among :func:`specs_in`."""
    return [spec for spec in specs_in(path) if isinstance(spec, TrainingGroup)]


def render(args: argparse.Namespace) -> None:
    """``airflow-elastic render``: print the manifests of the groups, stages and Ray jobs ``args.file`` defines."""
    import yaml

    from airflow_elastic.ray.render import render_rayjob
    from airflow_elastic.stages.job import render_job

    found = specs_in(args.file)
    if not found:
        raise CliError(f"{args.file}: defines no TrainingGroup, BatchStage or RayJob")
    chosen = [s for s in found if args.group in (None, s.name)]
    if not chosen:
        names = ", ".join(s.name for s in found)
        raise CliError(f"{args.file}: no training group, batch stage or Ray job named {args.group!r} (found: {names})")
    if args.runtime is not None and args.backend != "trainjob":
        raise CliError("--runtime applies to --backend trainjob only")
    manifests = []
    for spec in chosen:
        try:
            if isinstance(spec, TrainingGroup):
                manifests.append(_render_group(spec, args))
            elif isinstance(spec, RayJob):
                manifests.append(render_rayjob(spec, namespace=args.namespace))
            else:
                manifests.append(render_job(spec, namespace=args.namespace))
        except SpecError as err:
            backend = isinstance(spec, TrainingGroup) and args.backend != "jobset"
            where = f"group {spec.name!r} cannot run as a {args.backend}: " if backend else ""
            raise CliError(f"{args.file}: {where}{err}") from err
    sys.stdout.write(yaml.safe_dump_all(manifests, sort_keys=False))


def _render_group(group: TrainingGroup, args: argparse.Namespace) -> dict:
    from airflow_elastic.training.render import render_jobset, render_pytorchjob, render_trainjob

    if args.backend == "trainjob":
        return render_trainjob(group, namespace=args.namespace, runtime=args.runtime or "torch-distributed")
    if args.backend == "pytorchjob":
        return render_pytorchjob(group, namespace=args.namespace)
    return render_jobset(group, namespace=args.namespace)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: ``render``, and the local cluster's ``cluster`` commands."""
    parser = argparse.ArgumentParser(prog="airflow-elastic", description="Distributed training on Kubernetes JobSets.")
    commands = parser.add_subparsers(dest="command", required=True)
    cmd = commands.add_parser(
        "render",
        help="print the JobSet (or --backend TrainJob/PyTorchJob) YAML of the training groups, the Job YAML of the "
        "batch stages and the KubeRay RayJob YAML of the Ray jobs a Python file defines",
    )
    cmd.add_argument(
        "file", type=Path, help="a Python file (e.g. a DAG file) defining TrainingGroup, BatchStage or RayJob objects"
    )
    cmd.add_argument("--group", help="render only the group (or stage, or Ray job) with this name")
    cmd.add_argument("--namespace", default="default", help="namespace to render for (default: %(default)s)")
    cmd.add_argument(
        "--backend",
        choices=BACKENDS,
        default="jobset",
        help="render training groups as a JobSet, a Kubeflow Trainer TrainJob or a legacy PyTorchJob (default: "
        "%(default)s); what a backend cannot express is an error naming the field",
    )
    cmd.add_argument("--runtime", help="the TrainJob's ClusterTrainingRuntime (default: torch-distributed)")
    cmd.set_defaults(func=render)
    from airflow_elastic.localcluster.cli import add_commands  # standard library only

    add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line on ``argv`` (default: ``sys.argv[1:]``) and return its exit status."""
    args = build_parser().parse_args(argv)
    if args.command == "cluster":
        from airflow_elastic.localcluster.cli import run

        return run(args)
    try:
        args.func(args)
        sys.stdout.flush()
    except CliError as err:
        print(f"airflow-elastic: error: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. `airflow-elastic render ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
