"""Real traffic: production traces loaded as request frames, and the description of a workload."""

__all__: list[str] = []
