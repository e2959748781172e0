"""A stand-in for ``perf_analyzer`` (not installable here) that ``genai-perf profile`` runs as its load generator.

It takes the flags genai-perf passes, sends genai-perf's ``inputs.json`` payloads to the OpenAI-compatible
server with ``--concurrency-range`` requests in flight until ``--request-count`` have been sent, stamps each
request's send time and each server-sent event's arrival with ``time.time_ns()``, and writes perf_analyzer's
profile export layout (triton-inference-server/perf_analyzer docs/benchmarking.md, "jq . profile_export.json"):
``experiments[0].experiment {mode, value}``, ``requests[] {timestamp, request_inputs {payload},
response_timestamps, response_outputs [{response}]}``, ``window_boundaries``, ``version``, ``service_kind``,
``endpoint``. genai-perf then computes its metrics from that file exactly as after a perf_analyzer run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import httpx


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="perf_analyzer")
    for flag in ("-m", "-i", "-u", "--endpoint", "--service-kind", "--input-data", "--profile-export-file"):
        p.add_argument(flag, required=True)
    p.add_argument("--async", action="store_true")
    p.add_argument("--stability-percentage")
    p.add_argument("--request-count", type=int, required=True)
    p.add_argument("--concurrency-range", type=int, required=True)
    return p.parse_args()


async def _send(client: httpx.AsyncClient, url: str, payload: dict) -> dict:
    body = json.dumps(payload, separators=(",", ":"))
    record = {"timestamp": time.time_ns(), "request_inputs": {"payload": body}}
    stamps, outputs = [], []
    headers = {"Content-Type": "application/json"}
    async with client.stream("POST", url, content=body, headers=headers) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                stamps.append(time.time_ns())
                outputs.append({"response": line + "\n\n"})
    return record | {"response_timestamps": stamps, "response_outputs": outputs}


async def _run(args: argparse.Namespace) -> list[dict]:
    with open(args.input_data) as f:
        payloads = [entry["payload"][0] for entry in json.load(f)["data"]]
    url = f"http://{args.u}/{args.endpoint}"
    sent, requests = 0, []

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal sent
        while sent < args.request_count:
            index, sent = sent, sent + 1
            requests.append(await _send(client, url, payloads[index % len(payloads)]))

    # a fresh connection per request (llama-server may close one after a stream), never an env proxy
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=600, limits=limits, trust_env=False) as client:
        await asyncio.gather(*(worker(client) for _ in range(args.concurrency_range)))
    return sorted(requests, key=lambda r: r["timestamp"])


def main() -> None:
    args = _args()
    requests = asyncio.run(_run(args))
    export = {
        "experiments": [
            {
                "experiment": {"mode": "concurrency", "value": args.concurrency_range},
                "requests": requests,
                "window_boundaries": [requests[0]["timestamp"], max(r["response_timestamps"][-1] for r in requests)],
            }
        ],
        "version": "stand-in: tests/data/genai_perf/perf_analyzer_standin.py",
        "service_kind": args.service_kind,
        "endpoint": args.endpoint,
    }
    with open(args.profile_export_file, "w") as f:
        json.dump(export, f)


if __name__ == "__main__":
    main()
