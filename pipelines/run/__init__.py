"""Running a conversion: the plan decided at the door (plan.py), the config
and runner (conversion.py), the lifecycle from lock to end (lifecycle.py),
the graph (pipeline.py), where it runs (runtime.py)."""
