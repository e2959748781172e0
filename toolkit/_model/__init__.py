"""The serving model: catalogs, memory and KV cache, the one cost model, batching curves, host measurement."""

__all__: list[str] = []
