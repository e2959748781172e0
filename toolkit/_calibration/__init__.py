"""Calibration: fitting the cost model's efficiencies to measurements and predicting sweeps with them."""

__all__: list[str] = []
