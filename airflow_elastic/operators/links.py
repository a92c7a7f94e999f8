"""Operator extra links (buttons on a task instance in Airflow's UI): the sweep's report and plot, the run report,
the served endpoint.

Airflow 3 evaluates each link of a task on the worker when the task instance ends (``finalize``) and keeps the URL in
XCom (``_link_<class name>``), where the UI reads it; ``finalize`` also runs when the task defers, when there is no
result yet (no link then, and no read of a missing XCom). Each link here is a place in the task's own result (XCom
``return_value``), found by :attr:`ResultLink.path`; a local path becomes a ``file://`` URL, a URI (``s3://``,
``http://``) stays as it is, and a result without it (the task failed, no report was written) gives no link.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any, ClassVar

from airflow.sdk import BaseOperatorLink


def location_url(location: Any) -> str:
    """A link to ``location``: a URI as it is, an absolute local path as ``file://``; ``""`` for anything else."""
    if not isinstance(location, str) or not location:
        return ""
    if "://" in location:
        return location
    return PurePosixPath(location).as_uri() if location.startswith("/") else ""


def result_location(result: Any, path: tuple[str, ...]) -> str:
    """The link to the value at ``path`` (keys) in a task's ``result``; ``""`` when there is none."""
    for key in path:
        result = result.get(key) if isinstance(result, Mapping) else None
    return location_url(result)


class ResultLink(BaseOperatorLink):
    """A link to the location at :attr:`path` in the task instance's result (XCom ``return_value``)."""

    name = "Result"
    path: ClassVar[tuple[str, ...]] = ()

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        """The result's location as a URL; ``""`` (no link) until the try succeeded."""
        # ``finalize`` runs at every end of a try's process, a deferral's included (the task instance's state then
        # says so): only a success has a result, and asking for a missing XCom logs an error in the task log.
        state = getattr(ti_key, "state", None)
        if state is not None and str(getattr(state, "value", state)) != "success":
            return ""
        from airflow.sdk.execution_time.xcom import XCom

        return result_location(XCom.get_value(ti_key=ti_key, key="return_value"), self.path)


class SweepReportLink(ResultLink):
    """``HyperparameterSweepOperator``'s report (``sweep.json``: every trial, the best, the objective)."""

    name = "Sweep report"
    path = ("report", "json")


class SweepPlotLink(ResultLink):
    """``HyperparameterSweepOperator``'s plot (``sweep.png``: the objective of every trial over time)."""

    name = "Sweep plot"
    path = ("report", "png")


class RunReportLink(ResultLink):
    """A publishing task's run report (``locations.report`` of its result: the nightly pipeline's ``report.json``)."""

    name = "Run report"
    path = ("locations", "report")


class ServedEndpointLink(ResultLink):
    """``InferenceServiceOperator``'s served endpoint (the InferenceService's URL)."""

    name = "Served endpoint"
    path = ("url",)


#: Every link class, as ``get_provider_info()`` registers them ("extra-links").
LINKS = (SweepReportLink, SweepPlotLink, RunReportLink, ServedEndpointLink)
