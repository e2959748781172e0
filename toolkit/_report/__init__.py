"""Charts and the self-contained HTML report."""

__all__: list[str] = []
