"""``airflow-elastic cluster ...``: start, inspect and stop a local cluster from the shell."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import signal
import sys
import urllib.error
import urllib.parse
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow_elastic.localcluster.cluster import ClusterError, LocalCluster
from airflow_elastic.localcluster.errors import ApiError

DEFAULT_STATE_DIR = Path(os.environ.get("AIRFLOW_ELASTIC_CLUSTER_DIR", Path.home() / ".airflow-elastic" / "cluster"))
CONNECTION_ID = "local_cluster"
#: The Airflow Variable from which an example DAG reads its image's scripts folder, by image: ``/workspace/scripts``
#: in the image on a real cluster, the folder of the mapped command's script on this one (``dags/nightly_training.py``).
SCRIPTS_VARIABLES = {"ghcr.io/airflow-elastic/digits-trainer:0.1.0": "nightly_training_scripts"}


def connection_hint(cluster: LocalCluster, image_map: Mapping[str, list[str]] | None = None) -> str:
    """How to point Airflow at this cluster: an explicitly named connection, never an implicit default; and the
    Variables that tell DAGs where their mapped images' scripts are."""
    extra = {"kube_config_path": str(cluster.kubeconfig), "namespace": "default"}
    conn = json.dumps({"conn_type": "kubernetes", "extra": extra})
    variables = "".join(f"            export {line}\n" for line in scripts_variables(image_map or {}))
    return (
        f"Local cluster running at {cluster.url} (state in {cluster.state_dir})\n"
        f"  kubectl:  export KUBECONFIG={cluster.kubeconfig}\n"
        f"  Airflow:  export AIRFLOW_CONN_{CONNECTION_ID.upper()}='{conn}'\n"
        f'            and use kubernetes_conn_id="{CONNECTION_ID}" in your tasks.\n'
        f"{variables}"
        "  Nothing picks this cluster implicitly: tasks reach it only through that connection."
    )


def network_line(ready: Mapping[str, Any]) -> str:
    """What ``cluster up`` says of the pod network: the mode the server chose and why."""
    network = ready.get("network") or {}
    where = f" (bridge {network['bridge']}, pod subnet {network['subnet']})" if network.get("bridge") else ""
    return f"  Pod network: {network.get('mode', 'loopback')}{where}: {network.get('reason', 'unknown')}"


def scripts_variables(image_map: Mapping[str, list[str]]) -> list[str]:
    """``AIRFLOW_VAR_<NAME>=<folder>`` for each image of :data:`SCRIPTS_VARIABLES` mapped to a command that runs a
    script file (an argument after the program): the folder of that script, where the image's other scripts are."""
    lines = []
    for image, variable in sorted(SCRIPTS_VARIABLES.items()):
        arguments = image_map.get(image, ())[1:]
        scripts = [Path(arg) for arg in arguments if Path(arg).is_absolute() and Path(arg).is_file()]
        if scripts:
            lines.append(f"AIRFLOW_VAR_{variable.upper()}={shlex.quote(str(scripts[0].parent))}")
    return lines


def up(args: argparse.Namespace) -> int:
    from airflow_elastic.localcluster.imagemap import parse_image_map
    from airflow_elastic.localcluster.serve import load_config  # the server's modules, only when starting one

    config = load_config(args.state_dir)  # what this state directory ran with last (default cluster if new)
    if args.image_map:
        config = dataclasses.replace(config, image_map=parse_image_map(args.image_map, Path.cwd()))
    if args.jobset_feature_gates is not None:
        config = dataclasses.replace(config, jobset_restart_job=_restart_job_gate(args.jobset_feature_gates))
    if args.network is not None:
        config = dataclasses.replace(config, network=args.network)
    cluster = LocalCluster(args.state_dir, config=config)
    if (ready := cluster.ready_info()) is not None:
        if config != load_config(args.state_dir):
            raise ClusterError(
                f"a local cluster is already running on {args.state_dir} (pid {ready['pid']}) with another image "
                "map, feature gates or network mode; they are fixed for a cluster's life: run `airflow-elastic cluster "
                "down` first"
            )
        print(f"a local cluster is already running (pid {ready['pid']})")
        print(connection_hint(LocalCluster.attach(args.state_dir), config.image_map))
        print(network_line(ready))
        return 0
    cluster.start(detach=args.detach)
    print(connection_hint(cluster, config.image_map), flush=True)
    print(network_line(cluster.ready_info() or {}), flush=True)
    for image, command in sorted(config.image_map.items()):
        print(f"  image {image} runs: {shlex.join(command)}")
    if args.detach:
        print(f"Stop it with: airflow-elastic cluster down --state-dir {cluster.state_dir}")
        return 0
    print("Press Ctrl-C to stop.", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        assert cluster.process is not None
        cluster.process.wait()
        print("the local cluster server exited; see", cluster.log_file, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        cluster.stop()


def _restart_job_gate(gates: str) -> bool:
    """JobSet's ``--feature-gates`` (``RestartJob=true``; the only gate the local cluster implements)."""
    enabled = False
    for item in filter(None, gates.split(",")):
        gate, _, value = item.partition("=")
        if gate != "RestartJob" or value.lower() not in ("true", "false"):
            raise ClusterError(f"unknown JobSet feature gate setting {item!r}: only RestartJob=true|false")
        enabled = value.lower() == "true"
    return enabled


def down(args: argparse.Namespace) -> int:
    cluster = LocalCluster(args.state_dir)
    if cluster.ready_info() is None:
        print(f"no local cluster is running on {cluster.state_dir}")
        return 0
    cluster.stop()
    print("local cluster stopped (state kept; `cluster up` resumes it)")
    return 0


def status(args: argparse.Namespace) -> int:
    cluster = LocalCluster.attach(args.state_dir)
    nodes = cluster.get("/api/v1/nodes")["items"]
    pods = cluster.get("/api/v1/pods")["items"]
    jobsets = cluster.get("/apis/jobset.x-k8s.io/v1alpha2/jobsets")["items"]
    print(f"url: {cluster.url}\nkubeconfig: {cluster.kubeconfig}\npid: {(cluster.ready_info() or {}).get('pid')}")
    print(network_line(cluster.ready_info() or {}).strip())
    print(f"nodes: {len(nodes)} ({', '.join(n['metadata']['name'] for n in nodes)})")
    phases = Counter(p.get("status", {}).get("phase", "Unknown") for p in pods)
    print(f"pods: {len(pods)}" + (f" ({', '.join(f'{k} {v}' for k, v in sorted(phases.items()))})" if pods else ""))
    print(f"jobsets: {len(jobsets)}")
    return 0


def logs(args: argparse.Namespace) -> int:
    cluster = LocalCluster.attach(args.state_dir)
    query = {"follow": "true"} if args.follow else {}
    if args.container:
        query["container"] = args.container
    path = f"/api/v1/namespaces/{args.namespace}/pods/{args.pod}/log?{urllib.parse.urlencode(query)}"
    for chunk in cluster.stream(path):
        sys.stdout.write(chunk)
        sys.stdout.flush()
    return 0


def requests(args: argparse.Namespace) -> int:
    cluster = LocalCluster.attach(args.state_dir)
    counts = Counter((r["verb"], r["resource"], r["user_agent"].split(" ")[0]) for r in cluster.requests())
    for (verb, resource, agent), n in sorted(counts.items()):
        print(f"{n:6d}  {verb:16s} {resource or '-':32s} {agent}")
    return 0


def preempt(args: argparse.Namespace) -> int:
    cluster = LocalCluster.attach(args.state_dir)
    options = {k: v for k, v in vars(args).items() if k in PREEMPT_OPTIONS and v is not None}
    result = cluster.preempt_node(args.node, args.style, **options)
    print(f"{args.style} preemption of {result['node']} started; pods: {', '.join(result['pods']) or 'none'}")
    return 0


def evict(args: argparse.Namespace) -> int:
    LocalCluster.attach(args.state_dir).evict_pod(args.namespace, args.pod, args.grace_seconds)
    print(f"pod {args.namespace}/{args.pod} evicted")
    return 0


def koordlet(args: argparse.Namespace) -> int:
    cluster = LocalCluster.attach(args.state_dir)
    result = cluster.koordlet_evict(args.namespace, args.pod, args.feature, by_api=args.by_api)
    how = "evicted through the Eviction API" if args.by_api else f"killed ({', '.join(result['killed']) or 'none'})"
    print(f"pod {args.namespace}/{args.pod} {how} by koordlet for {args.feature}")
    return 0


def fault(args: argparse.Namespace) -> int:
    cluster = LocalCluster.attach(args.state_dir)
    if args.kind == "clear":
        cluster.clear_faults()
        print("API faults cleared, preemption schedule stopped")
        return 0
    if args.kind == "drop-watches":
        print(f"dropped {cluster.drop_watches(args.resource, args.namespace)} watch(es)")
        return 0
    if args.kind == "expire-token":
        cluster.expire_token()
        print(f"token expired; the new one is in {cluster.kubeconfig}")
        return 0
    rule = {k: getattr(args, k) for k in ("code", "verb", "resource", "namespace", "count", "seconds", "retry_after")}
    if args.latency:
        rule["latency"] = args.latency if len(args.latency) > 1 else args.latency[0]
    added = cluster.inject_api_fault(args.kind, **{k: v for k, v in rule.items() if v is not None})
    print(json.dumps(added))
    return 0


def chaos(args: argparse.Namespace) -> int:
    cluster = LocalCluster.attach(args.state_dir)
    if args.stop:
        print(json.dumps(cluster.stop_preemptions(), indent=2))
        return 0
    means = dict(item.split("=", 1) for item in args.mean)
    result = cluster.start_preemptions(
        {pool: float(m) for pool, m in means.items()},
        seed=args.seed,
        style=(args.style or ["gke"])[0] if len(args.style or []) < 2 else args.style,
        replace_after=args.replace_after,
    )
    print(json.dumps(result))
    return 0


def clock(args: argparse.Namespace) -> int:
    """Read or move the CronJob controller's clock (``/debug/clock``)."""
    from datetime import datetime

    cluster = LocalCluster.attach(args.state_dir)
    if args.reset:
        now = cluster.reset_clock()
    elif args.advance is not None:
        now = cluster.advance_clock(args.advance)
    elif args.set:
        now = cluster.set_clock(datetime.fromisoformat(args.set.replace("Z", "+00:00")))
    else:
        now = cluster.controller_time()
    print(f"controller time: {now.isoformat()}")
    return 0


PREEMPT_OPTIONS = (
    "grace_seconds",
    "delete_after",
    "replace_after",
    "notice_seconds",
    "deadline_seconds",
    "unreachable_after",
)
STYLES = ("gke", "eks", "karpenter", "vanish")


def _add_disruption_commands(command) -> None:
    """``cluster preempt|evict|koordlet|fault|chaos``: failure injection (see ``localcluster.faults``)."""
    pre = command("preempt", preempt, "reclaim a node like a cloud would (gke|eks|karpenter|vanish)")
    pre.add_argument("node")
    pre.add_argument("--style", choices=STYLES, default="gke")
    for option in PREEMPT_OPTIONS:
        pre.add_argument("--" + option.replace("_", "-"), type=float, help="seconds (style-specific; see docs)")
    ev = command("evict", evict, "evict a pod through the Eviction API (PDBs respected)")
    ev.add_argument("pod")
    ev.add_argument("-n", "--namespace", default="default")
    ev.add_argument("--grace-seconds", type=int)
    ko = command("koordlet", koordlet, "take a BestEffort pod back as Koordinator's koordlet does (kill, or --by-api)")
    ko.add_argument("pod")
    ko.add_argument("-n", "--namespace", default="default")
    ko.add_argument("--feature", default="BEMemoryEvict", help="BEMemoryEvict, BECPUEvict, MemoryEvict, CPUEvict...")
    ko.add_argument("--by-api", action="store_true", help="evict through the Eviction API instead of killing")
    ft = command("fault", fault, "inject API faults (error|latency|gone), drop watches, expire the token, clear")
    ft.add_argument("kind", choices=("error", "latency", "gone", "drop-watches", "expire-token", "clear"))
    ft.add_argument("--code", type=int, help="error: 401, 429, 500, 503 or 504")
    ft.add_argument("--verb", help="get, list, watch, create, update, patch, delete, deletecollection")
    ft.add_argument("--resource", help="e.g. pods or jobsets.jobset.x-k8s.io")
    ft.add_argument("-n", "--namespace")
    ft.add_argument("--count", type=int, help="for this many requests")
    ft.add_argument("--seconds", type=float, help="for this long")
    ft.add_argument("--retry-after", type=int)
    ft.add_argument("--latency", type=float, nargs="+", metavar="SECONDS", help="fixed, or LOW HIGH")
    ch = command("chaos", chaos, "start or stop a seeded random preemption schedule")
    ch.add_argument("--mean", action="append", default=[], metavar="POOL=SECONDS", help="mean time between reclaims")
    ch.add_argument("--seed", type=int, default=0)
    ch.add_argument("--style", choices=STYLES, action="append", help="repeat to mix styles (default gke)")
    ch.add_argument("--replace-after", type=float, default=5.0)
    ch.add_argument("--stop", action="store_true")


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Register ``cluster up|down|status|logs|requests|clock|preempt|evict|koordlet|fault|chaos`` on the main CLI."""
    cluster = commands.add_parser("cluster", help="run a local cluster (Kubernetes API, pods as local processes)")
    sub = cluster.add_subparsers(dest="cluster_command", required=True)

    def command(name: str, func, help: str) -> argparse.ArgumentParser:
        parser = sub.add_parser(name, help=help)
        parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR, help="default: %(default)s")
        parser.set_defaults(func=func)
        return parser

    up_cmd = command("up", up, "start a local cluster (foreground unless --detach)")
    up_cmd.add_argument("--detach", action="store_true", help="keep running in the background")
    up_cmd.add_argument(
        "--image-map",
        action="append",
        default=[],
        metavar="FILE|IMAGE=COMMAND",
        help="the local command that stands for an image's entrypoint: a YAML/JSON file {image: command} or one "
        "IMAGE=COMMAND pair (repeatable; kept in the state directory until replaced)",
    )
    up_cmd.add_argument(
        "--jobset-feature-gates",
        metavar="GATES",
        help="the JobSet controller's --feature-gates: RestartJob=true enables the RestartJob and "
        "RestartJobAndIgnoreMaxRestarts failure-policy actions (kept in the state directory until replaced)",
    )
    up_cmd.add_argument(
        "--network",
        choices=("auto", "netns", "loopback"),
        help="pod networking: auto (the default: netns where possible, else loopback), netns (a network namespace "
        "per pod: Linux, root) or loopback (pods share the host's network, a loopback IP each); kept until replaced",
    )
    command("down", down, "stop the local cluster (its state is kept)")
    command("status", status, "show the cluster's address, nodes and workload counts")
    log_cmd = command("logs", logs, "print a pod's logs")
    log_cmd.add_argument("pod")
    log_cmd.add_argument("-n", "--namespace", default="default")
    log_cmd.add_argument("-c", "--container")
    log_cmd.add_argument("-f", "--follow", action="store_true")
    command("requests", requests, "count the API requests the server has answered, by verb, resource and client")
    clk = command("clock", clock, "read or move the CronJob controller's clock (tests need not wait for a schedule)")
    moves = clk.add_mutually_exclusive_group()
    moves.add_argument("--advance", type=float, metavar="SECONDS", help="move it forward (negative: back)")
    moves.add_argument("--set", metavar="TIME", help="set it, e.g. 2026-03-29T01:30:00Z")
    moves.add_argument("--reset", action="store_true", help="back to the real time")
    _add_disruption_commands(command)


def run(args: argparse.Namespace) -> int:
    try:
        return args.func(args)
    except (ClusterError, ApiError, urllib.error.URLError) as err:
        print(f"airflow-elastic: error: {err}", file=sys.stderr)
        return 1
