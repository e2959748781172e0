"""Why a measurement cannot support a fit: a busy host (other processes took its CPU) or an unsteady
one (the server's own speed moved), each as the sentence the report shows instead of the numbers."""

from __future__ import annotations

import numpy as np
import pandas as pd

from toolkit._sweep.host_state import BUSY_LOAD_PER_CORE, BUSY_OPENING, BUSY_OTHER_SHARE
from toolkit._sweep.levels import NOISY_TOLERANCE
from toolkit._sweep.profile_cells import profile_cells

__all__: list[str] = []

UNSTEADY_OPENING = "Measured on an unsteady host: "


def busy_reason(profile: pd.DataFrame, others: dict[str, float] | None = None) -> str:
    """Why the measurement cannot support a fit (a busy host during the profile or other phases), or ''.

    ``others`` maps a phase name (``sweep``, ``replay``) to the share of the host's CPU other
    processes used during it.
    """
    reasons = []
    waves = profile.drop_duplicates("wave")
    if waves["busy"].any():
        share = waves["other_cpu_share"].max()
        share_text = f", up to {share:.0%} of its CPU" if np.isfinite(share) else ""
        reasons.append(
            f"other processes were busy during {int(waves['busy'].sum())} of {len(waves)} profile waves{share_text}"
        )
    for phase, share in (others or {}).items():
        if np.isfinite(share) and share > BUSY_OTHER_SHARE:
            reasons.append(f"other processes used {share:.0%} of the host's CPU during the {phase}")
    if not reasons:
        return ""
    return (
        BUSY_OPENING + "; ".join(reasons) + f" (more than {BUSY_OTHER_SHARE:.0%} counts as busy). "
        "The fitted model is not presented, because it would describe the competition, not the server."
    )


def bench_host_busy(load_1m_before: float, profile: pd.DataFrame, others: dict[str, float], cores: int) -> bool:
    """The bench scripts' rule: :func:`busy_reason` says busy, or the host's 1-minute load before the
    run (before its server started, so none of it is the server's) was above ``BUSY_LOAD_PER_CORE``
    per core."""
    return load_1m_before > BUSY_LOAD_PER_CORE * cores or busy_reason(profile, others) != ""


# what each family of profile cells identifies, for the refusal when every cell of one is noisy
_FAMILY_TERMS = {
    "decode": "the bandwidth term from the step overhead",
    "batch": "the per-sequence cost of a batch",
    "prefill": "the prefill rate from the request overhead",
    "mixed": "what a prompt's prefill costs the decodes it runs beside",
}


def unsteady_reason(profile: pd.DataFrame) -> str:
    """Why the profile cannot support a fit though the host was not busy, or ''.

    Noisy cells are left out of the fit (:func:`toolkit.calibrate`); when every cell of one family
    (``decode``, ``batch``, ``prefill``) is noisy, what that family identifies is left to the
    defaults, and a fit presented from the rest would charge the host's unsteadiness to the model.
    """
    cells = profile_cells(profile).set_index(["cell", "batch", "prompt_tokens"])
    reasons = []
    for family, group in cells.groupby(level=0, sort=False):
        if not group["noisy"].all():
            continue
        label = {
            "decode": "context {p} tokens",
            "batch": "batch {b}",
            "prefill": "{p} tokens",
            "mixed": "{p} tokens among {b}",
        }[family]
        spreads = ", ".join(
            f"{label.format(p=int(prompt), b=int(batch))}: {row.low_ms:.0f}-{row.high_ms:.0f} ms"
            for (_, batch, prompt), row in group.iterrows()
        )
        reasons.append(
            f"every {family} cell of the profile varied between its passes by a standard deviation above"
            f" {NOISY_TOLERANCE:.0%} of its median"
            f" ({spreads}), so the fit could not separate {_FAMILY_TERMS[family]}"
        )
    if not reasons:
        return ""
    return (
        UNSTEADY_OPENING + "; ".join(reasons) + ", though other processes were not busy: the server's own speed"
        " moved during the run. The fitted model is not presented; run the report again."
    )
