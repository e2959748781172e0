"""The shared vocabulary: the load description, the metric names and their units, and the keyword-only
signature helper that every layer (serving model, simulator, planner, verification, scale-out) uses.

This package is the ground floor: it imports nothing from the other toolkit subpackages, so every
layer can import it.
"""

from __future__ import annotations

__all__: list[str] = []
