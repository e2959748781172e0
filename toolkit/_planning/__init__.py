"""Capacity planning: the SLO planner, its Pareto frontier and its command line."""

__all__: list[str] = []
