"""Benchmark: the serving model against a real GPU (this project's H200 measurement).

On a machine with a CUDA GPU and PyTorch, ``--measure`` first runs ``gpu_reference_engine.py`` and
writes its raw output to ``reports/bench/gpu_reference_raw.json`` (the packaged table
``toolkit/_data/gpu_reference_h200.csv`` was made from such a run on an H200). Without it, the packaged
measurement is compared. Writes ``reports/bench/gpu_reference.json``:

- the hardware against the catalog's datasheet figures (copy bandwidth, bf16 and fp8 GEMM rates);
- the default cost model's error per kind of step (median and largest |error|, signed median);
- what the decode steps say beyond the model: a least-squares split of the decode step into
  weights read, KV read and a per-sequence cost, giving the bandwidth share each part reaches;
- the source of the default ``mfu`` and ``serial_share`` (efficiency.csv): one least-squares fit of the
  two over every measured step, the other efficiencies at their defaults.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "reports" / "bench"


def _decode_split(check, bandwidth_gb_s: float, weight_bytes: float, kv_bytes_per_token: float) -> dict:
    decode = check[check["kind"] == "decode"]
    y = decode["measured_ms"].to_numpy(float)
    design = np.c_[
        np.full(len(y), weight_bytes / bandwidth_gb_s / 1e6),  # ms at the full datasheet bandwidth
        decode["kv_tokens"].to_numpy(float) * kv_bytes_per_token / bandwidth_gb_s / 1e6,
        decode["decode_seqs"].to_numpy(float),
    ]
    # relative least squares: every step weighs the same whatever its length
    coef, *_ = np.linalg.lstsq(design / y[:, None], np.ones_like(y), rcond=None)
    fitted = design @ coef
    return {
        "weights_bandwidth_share": float(1 / coef[0]),
        "kv_bandwidth_share": float(1 / coef[1]),
        "per_sequence_us": float(coef[2] * 1e3),
        "median_abs_err": float(np.median(np.abs(fitted / y - 1))),
        "max_abs_err": float(np.max(np.abs(fitted / y - 1))),
        "note": "decode step = weights / (bandwidth x a) + KV read / (bandwidth x b) + c x sequences, fitted",
    }


def _roofline_fit(check) -> dict:
    """``mfu`` and ``serial_share`` fitted together to every measured step (errors as log ratios, so a
    step too slow and one too fast by the same factor weigh the same), the other efficiencies held."""
    from scipy.optimize import least_squares

    import toolkit as tk

    measured = check["measured_ms"].to_numpy(float)

    def residuals(x):
        predicted = tk.gpu_reference_check(calibration={"mfu": x[0], "serial_share": x[1]})["predicted_ms"]
        return np.log(predicted.to_numpy(float) / measured)

    fit = least_squares(residuals, x0=[0.5, 0.0], bounds=([0.05, 0.0], [1.0, 1.0]))
    errors = np.expm1(fit.fun)
    return {
        "mfu": float(fit.x[0]),
        "serial_share": float(fit.x[1]),
        "steps": len(measured),
        "median_abs_err": float(np.median(np.abs(errors))),
        "max_abs_err": float(np.max(np.abs(errors))),
        "note": "mfu and serial_share fitted to every step (prefill, decode, mixed), mbu and overheads at defaults",
    }


def main() -> None:
    if "--measure" in sys.argv:
        subprocess.run([sys.executable, str(Path(__file__).with_name("gpu_reference_engine.py")), str(OUT)], check=True)
        (OUT / "gpu_reference.json").rename(OUT / "gpu_reference_raw.json")

    import toolkit as tk
    from toolkit._data import load_csv

    cm = tk.cost_model("Llama-3.1-8B", "H200", "bf16")
    data = load_csv("gpu_reference_h200.csv").set_index("kind")
    check = tk.gpu_reference_check()
    per_kind = {
        kind: {
            "rows": len(group),
            "median_abs_err": float(group["error"].abs().median()),
            "max_abs_err": float(group["error"].abs().max()),
            "median_signed_err": float(group["error"].median()),
        }
        for kind, group in check.groupby("kind")
    }
    gpu = tk.gpus().set_index("name").loc["H200"]
    result = {
        "measured": "2026-12-04, one NVIDIA H200 (see toolkit/_data/gpu_reference_h200.csv)",
        "hardware": {
            "copy_gb_s": float(data.loc["copy_bandwidth", "value"]),
            "copy_share_of_datasheet": float(data.loc["copy_bandwidth", "value"] / gpu["bandwidth_gb_s"]),
            "bf16_tflops": float(data.loc["gemm_bf16", "value"]),
            "bf16_share_of_datasheet": float(data.loc["gemm_bf16", "value"] / gpu["fp16_tflops"]),
            "fp8_tflops": float(data.loc["gemm_fp8", "value"]),
            "fp8_share_of_datasheet": float(data.loc["gemm_fp8", "value"] / gpu["fp8_tflops"]),
        },
        "default_model": {
            "mbu": cm.mbu,
            "mfu": cm.mfu,
            "serial_share": cm.serial_share,
            "step_overhead_ms": cm.step_overhead_ms,
            "per_kind": per_kind,
        },
        "decode_split": _decode_split(check, cm.bandwidth_gb_s, cm.weights_bytes, cm.kv_bytes_per_token),
        "roofline_fit": _roofline_fit(check),
        "rows": check.round(4).to_dict(orient="records"),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "gpu_reference.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))


if __name__ == "__main__":
    main()
