"""A sweep's plan: validated arguments, its levels and the fingerprint a resume must match."""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from toolkit._args import check_choice, check_int, check_number
from toolkit._queueing.arrivals import ARRIVALS, MAX_CA2
from toolkit._sweep.files import (
    split_credentials,
)

__all__: list[str] = []


# parameters that define the work; resuming with any of them changed would mix two experiments
_FINGERPRINT = (
    "model",
    "prompts_sha256",
    "limits",
    "rates",
    "arrivals",
    "ca2",
    "seed",
    "max_in_flight",
    "max_tokens",
    "repeats",
    "tag_levels",
    "extra_body",
)


@dataclass
class _Level:
    in_flight: int
    rate_rps: float
    repeat: int

    @property
    def label(self) -> str:
        return f"in-flight {self.in_flight}" if math.isnan(self.rate_rps) else f"{self.rate_rps:g} req/s"


@dataclass
class _Plan:
    """Validated arguments, the lanes' messages and what run.json records."""

    root: str
    chat_url: str
    metrics_url: str | None
    model: str | None
    prompts: list[Any]
    messages: list[list[dict[str, Any]]]
    levels: list[_Level]
    closed_loop: bool
    max_tokens: int
    postprocess: Callable | None
    slots: int
    attempts: int
    tag_levels: bool
    timeout_s: float
    deadline_s: float | None
    slo_ttft_ms: float | None
    slo_tpot_ms: float | None
    extra_body: dict[str, Any]
    arrivals: str
    ca2: float
    seed: int
    max_in_flight: int | None
    out_dir: Path | None
    resume: bool
    progress: bool
    auth: httpx.Auth | None  # the API key, else user:password@ of base_url; sent to base_url's origin only
    metrics_auth: httpx.Auth | None
    secrets: tuple[str, ...]
    params: dict[str, Any]

    @classmethod
    def from_args(cls, a: dict[str, Any]) -> _Plan:
        _check_url("base_url", a["base_url"])
        base_url, auth, url_secrets = split_credentials(a["base_url"])
        root = base_url.rstrip("/").removesuffix("/v1").rstrip("/")
        if a["model"] is not None and (not isinstance(a["model"], str) or not a["model"]):
            raise ValueError(f"model must be a non-empty string or None, got {a['model']!r}")
        if a["system_prompt"] is not None and not isinstance(a["system_prompt"], str):
            raise ValueError(f"system_prompt must be a string or None, got {type(a['system_prompt']).__name__}")
        messages = _messages(a["prompts"], a["system_prompt"])
        n = len(messages)
        closed_loop = a["rates"] is None
        max_in_flight, repeats, limits, rates, keys = _level_keys(a, n)
        arrivals = check_choice("arrivals", a["arrivals"], ARRIVALS)
        ca2 = check_number("ca2", a["ca2"], low=0, low_inclusive=False, high=MAX_CA2)
        if arrivals == "poisson" and ca2 != 1.0:
            raise ValueError(f"ca2 must be 1 for poisson arrivals (use arrivals='gamma'), got {ca2!r}")
        for name in ("tag_levels", "resume", "progress"):
            if not isinstance(a[name], bool):
                raise ValueError(f"{name} must be True or False, got {a[name]!r}")
        if a["postprocess"] is not None and not callable(a["postprocess"]):
            raise ValueError(f"postprocess must be callable or None, got {type(a['postprocess']).__name__}")
        extra_body = a["extra_body"] or {}
        if not isinstance(extra_body, Mapping):
            raise ValueError(f"extra_body must be a mapping or None, got {type(extra_body).__name__}")
        api_key = _api_key(a["api_key"], a["api_key_env"])
        if a["out_dir"] is not None and not isinstance(a["out_dir"], (str, os.PathLike)):
            raise ValueError(f"out_dir must be a folder path or None, got {type(a['out_dir']).__name__}")
        out_dir = None if a["out_dir"] is None else Path(a["out_dir"])
        if a["resume"] and out_dir is None:
            raise ValueError("resume=True needs out_dir (the folder of the sweep to continue)")
        chat_auth = BearerAuth(api_key) if api_key else auth  # the bearer token wins over URL credentials
        metrics_key = _api_key(a["metrics_api_key"], None, name="metrics_api_key")
        metrics_url, metrics_auth, more = _metrics_target(a["metrics_url"], root, chat_auth, metrics_key)
        url_secrets += more + ((metrics_key,) if metrics_key else ())
        plan = cls(
            root=root,
            chat_url=root + "/v1/chat/completions",
            metrics_url=metrics_url,
            model=a["model"],
            prompts=list(a["prompts"]),
            messages=messages,
            # repeats as passes over every level (every level once, then every level again), so that the
            # spread of the repeats' elasticities holds what moves between the levels' minutes
            levels=[_Level(k, r, rep) for rep in range(1, repeats + 1) for k, r in keys],
            closed_loop=closed_loop,
            max_tokens=check_int("max_tokens", a["max_tokens"], low=1, high=1_000_000),
            postprocess=a["postprocess"],
            slots=check_int("slots", a["slots"], low=1, high=10_000),
            attempts=check_int("attempts", a["attempts"], low=1, high=100),
            tag_levels=a["tag_levels"],
            timeout_s=check_number("timeout_s", a["timeout_s"], low=0, low_inclusive=False, high=86_400),
            deadline_s=_optional_positive("deadline_s", a["deadline_s"]),
            slo_ttft_ms=_optional_positive("slo_ttft_ms", a["slo_ttft_ms"]),
            slo_tpot_ms=_optional_positive("slo_tpot_ms", a["slo_tpot_ms"]),
            extra_body=dict(extra_body),
            arrivals=arrivals,
            ca2=ca2,
            seed=check_int("seed", a["seed"], low=0, high=2**63 - 1),
            max_in_flight=max_in_flight,
            out_dir=out_dir,
            resume=a["resume"],
            progress=a["progress"],
            auth=chat_auth,
            metrics_auth=metrics_auth,
            secrets=((api_key,) if api_key else ()) + url_secrets,
            params={},
        )
        plan.params = plan._fingerprint(n, messages, limits, rates, repeats, metrics_url, api_key is not None)
        return plan

    def _fingerprint(
        self, n: int, messages: list, limits: list[int], rates: list[float], repeats: int, metrics_url, key_set: bool
    ) -> dict[str, Any]:
        """The parameters a resume must match (written to run.json; no secret among them)."""
        return {
            "base_url": self.root,
            "model": self.model,
            "lanes": n,
            "prompts_sha256": hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest(),
            "limits": limits,
            "rates": rates,
            "arrivals": self.arrivals,
            "ca2": self.ca2,
            "seed": self.seed,
            "max_in_flight": self.max_in_flight,
            "max_tokens": self.max_tokens,
            "slots": self.slots,
            "attempts": self.attempts,
            "tag_levels": self.tag_levels,
            "metrics_url": metrics_url,
            "timeout_s": self.timeout_s,
            "deadline_s": self.deadline_s,
            "repeats": repeats,
            "slo_ttft_ms": self.slo_ttft_ms,
            "slo_tpot_ms": self.slo_tpot_ms,
            "extra_body": self.extra_body,
            "postprocess": getattr(self.postprocess, "__qualname__", None) if self.postprocess else None,
            "api_key_set": key_set,
        }


def _check_url(name: str, url: Any, also: str = "") -> None:
    """An http(s) URL with a host and, if given, a port from 1 to 65535; else a ValueError naming ``name``."""
    wanted = f"{name} must be an http(s) URL with a host, such as http://127.0.0.1:8000" + (
        f", or {also}" if also else ""
    )
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValueError(wanted)
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        raise ValueError(wanted) from None
    if not parsed.host:
        raise ValueError(wanted)
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        raise ValueError(f"{name}'s port must be from 1 to 65535, got {parsed.port}")


def _level_keys(a: dict[str, Any], n: int) -> tuple[int | None, int, list[int], list[float], list[tuple[int, float]]]:
    """(max_in_flight, repeats, limits, rates, one (in-flight cap, rate) key per level)."""
    max_in_flight = None if a["max_in_flight"] is None else check_int("max_in_flight", a["max_in_flight"], low=1)
    repeats = check_int("repeats", a["repeats"], low=1, high=1000)
    if a["rates"] is None:
        limits = _int_list("limits", a["limits"], low=1, high=n)
        return max_in_flight, repeats, limits, [], [(limit, math.nan) for limit in limits]
    rates = _float_list("rates", a["rates"])
    return max_in_flight, repeats, [], rates, [(max_in_flight or n, rate) for rate in rates]


def _api_key(api_key: Any, api_key_env: str | None, name: str = "api_key") -> str | None:
    """The key given, else the one in ``api_key_env``; checked, and never echoed in an error."""
    if api_key is None and api_key_env:
        api_key = os.environ.get(api_key_env) or None
    if api_key is not None and (not isinstance(api_key, str) or not api_key.strip()):
        raise ValueError(f"{name} must be a non-empty string or None")
    if api_key is not None and not (api_key.isascii() and api_key.isprintable()):
        # an HTTP header carries printable ASCII only
        raise ValueError(
            f"{name} must be printable ASCII (no control characters or non-ASCII letters); its value is not shown"
        )
    return api_key


class BearerAuth(httpx.Auth):
    """``Authorization: Bearer <token>`` on the requests it is passed to, and nowhere else."""

    def __init__(self, token: str) -> None:
        self._token = token

    def auth_flow(self, request: httpx.Request):  # noqa: ANN201 - httpx's generator protocol
        request.headers["Authorization"] = f"Bearer {self._token}"
        yield request

    def __repr__(self) -> str:
        return "BearerAuth(***)"


def same_origin(a: str, b: str) -> bool:
    """Whether two URLs share scheme, host and port (the port defaulting by scheme)."""
    x, y = httpx.URL(a), httpx.URL(b)
    default = {"http": 80, "https": 443}
    return (x.scheme, x.host, x.port or default.get(x.scheme)) == (y.scheme, y.host, y.port or default.get(y.scheme))


def _metrics_target(
    metrics_url: Any, root: str, chat_auth: httpx.Auth | None, metrics_key: str | None
) -> tuple[str | None, httpx.Auth | None, tuple[str, ...]]:
    """(the /metrics URL or None, its credentials, secrets found in it): the server's own by default.

    Credentials go only to the origin they came with: the page gets its own ``user:password@``, else
    ``metrics_api_key``, else the base URL's credentials when it is on the base URL's origin.
    """
    if metrics_url is False:
        return None, None, ()
    if metrics_url is None or metrics_url is True:
        metrics_url = root + "/metrics"
    _check_url("metrics_url", metrics_url, also="None or False")
    clean, own, secrets = split_credentials(metrics_url)
    if own is not None:
        return clean, own, secrets
    if metrics_key:
        return clean, BearerAuth(metrics_key), secrets
    return clean, chat_auth if same_origin(clean, root) else None, secrets


def _messages(prompts: Any, system_prompt: str | None) -> list[list[dict[str, Any]]]:
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence) or not len(prompts):
        raise ValueError("prompts must be a non-empty sequence of strings or of chat-message lists")
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    out = []
    for i, p in enumerate(prompts):
        if isinstance(p, str):
            out.append([*system, {"role": "user", "content": p}])
            continue
        ok = isinstance(p, Sequence) and len(p) > 0
        ok = ok and all(isinstance(m, Mapping) and isinstance(m.get("content"), str) and "role" in m for m in p)
        if not ok:
            raise ValueError(f"prompts[{i}] must be a string or a list of {{'role', 'content': str}} messages")
        out.append([*system, *(dict(m) for m in p)])
    return out


def _int_list(name: str, values: Any, *, low: int, high: int) -> list[int]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not len(values):
        raise ValueError(f"{name} must be a non-empty sequence of integers in {low}..{high}")
    out = [check_int(f"{name}[{i}]", v, low=low, high=high) for i, v in enumerate(values)]
    if len(set(out)) != len(out):
        raise ValueError(f"{name} must not repeat a value, got {out}")
    return out


def _float_list(name: str, values: Any) -> list[float]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not len(values):
        raise ValueError(f"{name} must be a non-empty sequence of positive numbers")
    out = [check_number(f"{name}[{i}]", v, low=0, low_inclusive=False, high=1e6) for i, v in enumerate(values)]
    if len(set(out)) != len(out):
        raise ValueError(f"{name} must not repeat a value, got {out}")
    return out


def _optional_positive(name: str, value: Any) -> float | None:
    return None if value is None else check_number(name, value, low=0, low_inclusive=False)


def _same_rate(a: Any, b: float) -> bool:
    a = math.nan if a is None else float(a)
    return (math.isnan(a) and math.isnan(b)) or a == b
