"""What a run was measured on, recorded with it so that a comparison can say what changed.

The client side (host, OS, CPU, GPU, Python and library versions) is read locally; the server side
from what the engine publishes about itself: llama.cpp's ``/props`` (``build_info``, ``total_slots``
= ``--parallel``, the context size, the model file and type), vLLM's ``/version`` and SGLang's
``/get_server_info``. A probe that fails leaves its fields out; none of them ever fails the run.
"""

from __future__ import annotations

import asyncio
import os
import platform
import shutil
import subprocess
from importlib import metadata
from typing import Any

import httpx

__all__: list[str] = []

_LIBRARIES = ("numpy", "pandas", "scipy", "httpx")


def host_environment() -> dict[str, Any]:
    """The measuring host: name, OS, usable CPU cores, GPUs (``nvidia-smi``) and library versions."""
    from toolkit import __version__

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    versions = {"python": platform.python_version(), "toolkit": __version__}
    for name in _LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return {
        "host": platform.node(),
        "os": platform.platform(terse=True),
        "cpu": f"{platform.machine()}, {cores} usable cores",
        "gpu": _gpus(),
        "library_versions": versions,
    }


def _gpus() -> str:
    if shutil.which("nvidia-smi") is None:
        return "none found (no nvidia-smi)"
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown (nvidia-smi failed)"
    return "; ".join(line.strip() for line in out.splitlines() if line.strip()) or "none found"


async def engine_environment(
    client: httpx.AsyncClient, root: str, auth: httpx.Auth | None, *, timeout_s: float
) -> dict[str, Any]:
    """What the server at ``root`` says about itself: ``engine``, ``engine_version``, ``server_flags``
    (the three endpoints asked at once, each for at most ``timeout_s``)."""
    props, info, version = await asyncio.gather(
        *(_get(client, f"{root}/{path}", auth, timeout_s) for path in ("props", "get_server_info", "version"))
    )
    if isinstance(props, dict) and "total_slots" in props:
        settings = props.get("default_generation_settings") or {}
        flags = {"parallel": props.get("total_slots"), "ctx_size": settings.get("n_ctx")}
        return {
            "engine": "llama.cpp",
            "engine_version": props.get("build_info"),
            "server_flags": {k: v for k, v in flags.items() if v is not None},
            "server_model": props.get("model_path"),
            "server_model_type": props.get("model_ftype"),
        }
    if isinstance(info, dict) and "version" in info:
        keys = (
            "tp_size",
            "dp_size",
            "max_running_requests",
            "chunked_prefill_size",
            "kv_cache_dtype",
            "mem_fraction_static",
        )
        return {
            "engine": "sglang",
            "engine_version": info.get("version"),
            "server_flags": {k: info[k] for k in keys if k in info},
        }
    if isinstance(version, dict) and "version" in version:
        return {"engine": "vllm", "engine_version": version["version"]}
    return {}


async def _get(client: httpx.AsyncClient, url: str, auth: httpx.Auth | None, timeout_s: float) -> Any:
    if timeout_s <= 0:
        return None
    try:
        response = await client.get(url, auth=auth or httpx.USE_CLIENT_DEFAULT, timeout=timeout_s)
        return response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


async def environment(
    client: httpx.AsyncClient, root: str, auth: httpx.Auth | None, *, timeout_s: float = 2.0
) -> dict[str, Any]:
    """The host's and the engine's environment in one mapping (``run.json``'s ``params.environment``);
    the engine is asked for at most ``timeout_s``."""
    return host_environment() | await engine_environment(client, root, auth, timeout_s=timeout_s)
