"""A seeded random preemption schedule, for demos and benchmarks: Poisson reclaims per node pool.

Each pool with a mean time between preemptions ``m`` (seconds) loses one of its live nodes after an exponential
wait of mean ``m``, again and again, in the chosen style; reclaimed nodes are replaced after ``replace_after``
so the pool keeps its size. The same seed and the same cluster give the same sequence of choices.

Several styles (``style=["gke", "vanish"]``) mix reclaims: each one draws its style uniformly from a separate seeded
stream, so the times and nodes are those of a single-style schedule with the same seed; ``options`` then maps each
style to its own options (``{"gke": {"grace_seconds": 1}, "vanish": {"unreachable_after": 2}}``).
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

from airflow_elastic.localcluster import errors
from airflow_elastic.localcluster.faults.disruptions import STYLES, Disruptions
from airflow_elastic.localcluster.kubelet.nodes import POOL_LABEL
from airflow_elastic.localcluster.resources import NODES

log = logging.getLogger(__name__)


class PreemptionSchedule:
    """Runs while started; :attr:`history` lists what it did (time offset, pool, node, style)."""

    def __init__(self, disruptions: Disruptions):
        self.disruptions = disruptions
        self.history: list[dict[str, Any]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.settings: dict[str, Any] = {}

    @property
    def running(self) -> bool:
        return any(not t.done() for t in self._tasks)

    def start(
        self,
        mean_seconds: dict[str, float],
        *,
        seed: int = 0,
        style: str | list[str] = "gke",
        replace_after: float | None = 5.0,
        options: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Start (or restart) the schedule: ``mean_seconds`` maps pool name → mean time between preemptions;
        ``style`` one style or a list to mix (``options`` then keyed by style)."""
        styles = [style] if isinstance(style, str) else list(style)
        unknown_styles = [s for s in styles if s not in STYLES]
        if unknown_styles or not styles:
            raise errors.BadRequest(f"unknown preemption style {style!r}: use one of {', '.join(STYLES)}")
        per_style = {s: (options or {}) for s in styles} if isinstance(style, str) else dict(options or {})
        if set(per_style) - set(styles):
            raise errors.BadRequest(f"options of a style mix must be keyed by its styles {styles}, got {options}")
        pools = {p.name for p in self.disruptions.config.pools}
        unknown = set(mean_seconds) - pools
        if unknown or not mean_seconds or any(m <= 0 for m in mean_seconds.values()):
            raise errors.BadRequest(f"mean_seconds must map pools {sorted(pools)} to positive seconds")
        self.stop()
        self.history = []
        self.settings = {"mean_seconds": mean_seconds, "seed": seed, "style": style, "replace_after": replace_after}
        loop = asyncio.get_running_loop()
        start = loop.time()
        for i, (pool, mean) in enumerate(sorted(mean_seconds.items())):
            rng = random.Random(f"{seed}:{pool}")  # one stream per pool: adding a pool does not shift the others
            styles_rng = random.Random(f"{seed}:{pool}:style")  # apart from rng: a mix keeps the times and nodes
            task = self._run(pool, mean, (rng, styles_rng), styles, replace_after, per_style, start)
            self._tasks.append(asyncio.create_task(task, name=f"preemption-schedule:{pool}:{i}"))
        return self.describe()

    def stop(self) -> dict[str, Any]:
        for task in self._tasks:
            task.cancel()
        self._tasks = []
        return self.describe()

    def describe(self) -> dict[str, Any]:
        return {"running": self.running, **self.settings, "history": self.history}

    def _disrupted(self, node: dict[str, Any], pool: str) -> bool:
        """A node already being reclaimed (cordoned, or carrying a taint its pool does not configure)."""
        configured = {t["key"] for p in self.disruptions.config.pools if p.name == pool for t in p.taints}
        spec = node.get("spec") or {}
        return bool(spec.get("unschedulable")) or any(t["key"] not in configured for t in spec.get("taints") or [])

    async def _run(
        self,
        pool: str,
        mean: float,
        rngs: tuple[random.Random, random.Random],
        styles: list[str],
        replace_after: float | None,
        options: dict[str, dict[str, Any]],
        start: float,
    ) -> None:
        loop = asyncio.get_running_loop()
        rng, styles_rng = rngs
        while True:
            await asyncio.sleep(rng.expovariate(1.0 / mean))
            nodes = sorted(
                n["metadata"]["name"]
                for n in self.disruptions.store.items(NODES)
                if (n["metadata"].get("labels") or {}).get(POOL_LABEL) == pool and not self._disrupted(n, pool)
            )
            if not nodes:
                continue
            node = rng.choice(nodes)
            style = styles[0] if len(styles) == 1 else styles_rng.choice(styles)
            try:
                self.disruptions.preempt_node(node, style, replace_after=replace_after, **options.get(style, {}))
            except errors.ApiError as err:
                log.warning("scheduled preemption of %s failed: %s", node, err.message)
                continue
            self.history.append({"at": round(loop.time() - start, 3), "pool": pool, "node": node, "style": style})
