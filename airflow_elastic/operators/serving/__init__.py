"""The publishing operators' glue: roll an InferenceService out, wait until it serves, or roll back."""
