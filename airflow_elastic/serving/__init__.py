"""Serving (pure): the KServe ``InferenceService`` the publishing step writes, the rollout verdicts (raw and
Knative modes), and the versioned publishing layout with its promotion rule."""
