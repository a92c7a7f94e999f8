"""OpenLineage for the operators, when the OpenLineage provider is installed (docs/concepts/lineage.md).

Airflow's OpenLineage listener (``apache-airflow-providers-openlineage``) asks an operator for its datasets through
``get_openlineage_facets_on_start``/``_on_complete``/``_on_failure``. :class:`LineageMixin` answers them with what
:mod:`airflow_elastic.lineage.datasets` decided from the operator's rendered arguments, wrapped into the provider's
``OperatorLineage``. Nothing here imports the provider until the listener calls: without it, the methods are never
called, and if one is, it returns ``None`` (no lineage) instead of failing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_elastic.training.spec import SpecError

if TYPE_CHECKING:
    from airflow_elastic.lineage.datasets import Lineage

#: The mixin's template fields: an operator adds them to its own ``template_fields``.
LINEAGE_FIELDS = ("lineage_inputs", "lineage_outputs")


class LineageMixin:
    """``lineage_inputs``/``lineage_outputs`` (templated storage locations) and the OpenLineage facet methods; an
    operator using it gives :meth:`_lineage`, its inputs and outputs once rendered."""

    lineage_inputs: list[str]
    lineage_outputs: list[str]

    def _take_lineage(self, inputs: Sequence[str], outputs: Sequence[str]) -> None:
        """Check and keep the two arguments (untemplated entries are checked now: a bad one fails the parse).

        Raises:
            SpecError: an argument is not a list of locations, or an entry is no absolute path or URI.
        """
        if inputs or outputs or isinstance(inputs, str) or isinstance(outputs, str):
            from airflow_elastic.lineage.datasets import location_problems

            problems = location_problems("lineage_inputs", inputs) + location_problems("lineage_outputs", outputs)
            if problems:
                raise SpecError(problems)
        self.lineage_inputs, self.lineage_outputs = list(inputs), list(outputs)

    def _lineage(self) -> Lineage:
        raise NotImplementedError

    def get_openlineage_facets_on_start(self) -> Any:
        """What the task reads and will write (``OperatorLineage``), for the OpenLineage START event."""
        return operator_lineage(self._lineage())

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """What the task read and wrote, for the COMPLETE event."""
        return operator_lineage(self._lineage())

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """What a failed try read (its outputs are not reported), for the FAIL event."""
        return operator_lineage(self._lineage().on_failure())


def operator_lineage(lineage: Lineage) -> Any:
    """``lineage`` as the OpenLineage provider's ``OperatorLineage`` of ``openlineage.client`` datasets; ``None``
    when the provider is not installed."""
    try:
        from airflow.providers.openlineage.extractors import OperatorLineage
        from openlineage.client.event_v2 import Dataset
    except ImportError:
        return None
    return OperatorLineage(
        inputs=[Dataset(namespace=d.namespace, name=d.name) for d in lineage.inputs],
        outputs=[Dataset(namespace=d.namespace, name=d.name) for d in lineage.outputs],
    )
