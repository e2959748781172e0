"""The environment a sweep records: the host's, and what the engine says about itself."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from toolkit._environment import engine_environment, host_environment


def _engine(routes: dict[str, dict]) -> dict:
    def handler(request: httpx.Request) -> httpx.Response:
        body = routes.get(request.url.path)
        return httpx.Response(200, json=body) if body is not None else httpx.Response(404)

    async def run():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await engine_environment(client, "http://engine", None, timeout_s=1.0)

    return asyncio.run(run())


def test_llama_cpp_props_give_engine_build_and_flags():
    props = {"total_slots": 4, "build_info": "b6123-abc", "model_path": "/m.gguf", "model_ftype": "Q4_K - Medium",
             "default_generation_settings": {"n_ctx": 8192}}  # fmt: skip
    env = _engine({"/props": props})
    assert env["engine"] == "llama.cpp" and env["engine_version"] == "b6123-abc"
    assert env["server_flags"] == {"parallel": 4, "ctx_size": 8192}


@pytest.mark.parametrize(
    ("routes", "expected"),
    [
        ({"/get_server_info": {"version": "0.5.23", "tp_size": 2, "mem_fraction_static": 0.88}},
         {"engine": "sglang", "engine_version": "0.5.23", "server_flags": {"tp_size": 2, "mem_fraction_static": 0.88}}),
        ({"/version": {"version": "0.34.0"}}, {"engine": "vllm", "engine_version": "0.34.0"}),
        ({}, {}),
    ],
)  # fmt: skip
def test_sglang_vllm_and_an_engine_that_says_nothing(routes, expected):
    assert _engine(routes) == expected


def test_host_environment_names_the_host_and_library_versions():
    env = host_environment()
    assert {"host", "os", "cpu", "gpu", "library_versions"} <= set(env)
    assert {"python", "toolkit", "numpy", "pandas"} <= set(env["library_versions"])
    json.dumps(env)  # it goes into run.json as it is
