"""Capacity at an SLO: the highest open-loop arrival rate a server sustains within its latency targets,
measured against a server (:func:`toolkit.find_capacity`) and predicted from the serving model and the
simulator (:func:`toolkit.predict_capacity`), by the same search and the same pass rule."""

__all__: list[str] = []
