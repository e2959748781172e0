"""Queueing: closed forms, arrival processes, the continuous-batching simulator and its checks."""

__all__: list[str] = []
