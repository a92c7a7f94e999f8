"""Waiting (pure): one wait decided once (the ``Watch``), the log cursor and which log is followed, each backend's
objects as the wait sees them, API-outage tolerance, and what a trigger's event carries for the task log."""
