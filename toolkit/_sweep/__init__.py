"""The concurrency-sweep harness: lanes, levels, /metrics, run files, prompts, the local llama-server, the command line."""

__all__: list[str] = []
