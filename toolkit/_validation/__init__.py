"""Checks of the model against measurements: the llama.cpp closed loop, the vLLM reference run, chimeraforge."""

__all__: list[str] = []
