"""Scale-out: grids of simulation scenarios, run in-process or on a Dask cluster."""

__all__: list[str] = []
