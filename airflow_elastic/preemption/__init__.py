"""Preemption (pure): why a pod stopped (classify), the evidence captured attempt by attempt, node-loss cascades,
what a wait saves on its JobSet, and the attempt decisions: resubmit from a checkpoint under the preemption budget,
or fail."""
