"""The uncertainty of the rates fitted efficiencies are shares of, added to their standard errors.

``mbu`` is a share of the device's ``bandwidth_gb_s`` and ``mfu`` of its matrix rate (the cost
model's ``tflops``): what a fit determines is the absolute rate, ``mbu x bandwidth_gb_s`` bytes/s of
weights and KV read and ``mfu x tflops`` FLOP/s, and the efficiency is that rate over the reference.
The other efficiencies are not shares of a measured rate: the overheads are times, ``serial_share``
is a share of a step, and ``batched_mbu_factor`` and ``tp_mbu_factor`` are ratios of two reads at the
same reference, which cancels from them.

Where the reference is itself measured (a :func:`toolkit.measure_host` row combined by
``best_of_hosts``, which gives ``bandwidth_gb_s_se`` and ``fp16_tflops_se``), a second run fits the
same absolute rate against a reference measured a little differently, so the efficiency moves by the
reference's own run-to-run spread: on a 2-core VM consecutive report runs measured the GEMM at 0.316
and 0.302 TFLOPS and the server's prefill at the same 0.0650 TFLOPS-equivalent, which moved ``mfu``
from 0.206 to 0.215, two to three times its fit-only standard errors (docs/methodology/observations.md). The
fit and the probe are independent measurements, and for a quotient of independent quantities the
relative standard uncertainties add in quadrature (GUM, JCGM 100:2008, 5.1.6):
``(se / value)^2 = (fit_se / value)^2 + (reference_se / reference)^2``.

Only the reported interval widens. Whether the data identify a parameter is a property of the fit
(:func:`toolkit._calibration.calibrate._identified_fit` compares the fit-only standard error with
``MAX_RELATIVE_SE``): a noisy probe makes an efficiency less comparable across runs, not less
determined by the profile. Predictions on the same device row do not carry it either: they use
``efficiency x reference``, the fitted absolute rate, whatever the reference's error. A catalog GPU
or a spec without those columns has no known reference uncertainty, and nothing is added.
"""

from __future__ import annotations

import math

from toolkit._model.cost import CostModel

__all__: list[str] = []

# efficiency -> the column of the device row holding the standard uncertainty of its reference
SHARES = {"mbu": "bandwidth_gb_s_se", "mfu": "fp16_tflops_se"}


def reference_rel_se(cm: CostModel) -> dict[str, float]:
    """The relative standard uncertainty of the reference each of ``SHARES`` is a share of, from the
    cost model's resolved device spec ``cm.gpu`` (NaN where the spec gives none). ``mfu``'s holds
    only where the cost model's matrix rate is the spec's ``fp16_tflops`` (not an FP8 or
    FP16-accumulate rate)."""
    references = {"mbu": ("bandwidth_gb_s", cm.bandwidth_gb_s), "mfu": ("fp16_tflops", cm.tflops)}
    out = {}
    for name, column in SHARES.items():
        rate_column, used = references[name]
        rate, se = _number(cm.gpu.get(rate_column)), _number(cm.gpu.get(column))
        out[name] = se / rate if rate > 0 and math.isclose(rate, float(used)) and se >= 0 else math.nan
    return out


def combined_se(value: float, fit_se: float, rel_se: float) -> float:
    """``fit_se`` with the reference's relative uncertainty ``rel_se`` added in quadrature (module
    docstring); ``fit_se`` itself where ``rel_se`` is unknown (NaN)."""
    if math.isnan(rel_se):
        return fit_se
    return math.hypot(fit_se, value * rel_se)


def _number(value: object) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
