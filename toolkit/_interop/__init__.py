"""Other benchmark tools' runs read into the toolkit's frames, a pair of runs compared, a plan row turned into a launch command."""

__all__: list[str] = []
