"""The Ray operator's glue: one KubeRay RayJob per task instance, submitted or adopted, awaited (deferred or on the
worker) with the driver's log in the task log."""
