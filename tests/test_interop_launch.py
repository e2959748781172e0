"""launch_config: a plan row as the engine's own command line, with only flags the engine defines."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from toolkit import launch_config

FLAGS = Path(__file__).parent / "data" / "engine_flags"
ROW = {"model": "Llama-3.1-8B", "gpu": "H100", "quant": "fp8", "backend": "vllm", "tensor_parallel": 2,
       "replicas": 3, "batch": 64}  # fmt: skip


def _flags(command: str) -> list[str]:
    return [a for a in shlex.split(command) if a.startswith("--")]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_flag_written_is_in_the_engine_parser(engine):
    known = set((FLAGS / f"{engine}.txt").read_text().split())
    command = launch_config(ROW, engine=engine, kv_dtype="fp8", max_batched_tokens=8192, context_tokens=8192)
    used = _flags(command)
    assert len(used) >= 9  # TP, sequences, token budget, KV dtype, memory fraction, length, weights, host, port
    assert [f for f in used if f not in known] == []


def test_vllm_command_carries_the_plan_row():
    args = shlex.split(launch_config(ROW, kv_dtype="fp8", gpu_memory_fraction=0.85, max_batched_tokens=4096))
    assert args[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B"]  # the catalog's Hugging Face id
    pairs = dict(zip(args[3::2], args[4::2], strict=False))
    assert pairs["--tensor-parallel-size"] == "2" and pairs["--max-num-seqs"] == "64"
    assert pairs["--quantization"] == "fp8" and pairs["--kv-cache-dtype"] == "fp8"
    assert pairs["--gpu-memory-utilization"] == "0.85" and pairs["--max-num-batched-tokens"] == "4096"


def test_llama_server_flags_all_appear_in_the_local_binary_help():
    from toolkit._sweep.llama_server import binary_path

    binary = binary_path()
    env = {**os.environ, "LD_LIBRARY_PATH": str(binary.parent)}
    help_text = subprocess.run([str(binary), "--help"], capture_output=True, text=True, env=env, timeout=60)
    known = set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", help_text.stdout + help_text.stderr))
    row = ROW | {"quant": "q4_k_m", "backend": "llamacpp"}
    command = launch_config(row, kv_dtype="q8", max_batched_tokens=2048, context_tokens=2048)
    used = _flags(command)
    assert {"--parallel", "--ctx-size", "--cache-type-k", "--split-mode", "--batch-size"} <= set(used)
    assert [f for f in used if f not in known] == []
    assert "--ctx-size 131072" in command  # 64 slots x 2048 tokens


def test_kubernetes_deployment_has_the_replicas_and_gpus_of_the_row():
    doc = yaml.safe_load(launch_config(ROW, kubernetes=True))
    assert doc["kind"] == "Deployment" and doc["spec"]["replicas"] == 3
    container = doc["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert container["command"] + container["args"] == shlex.split(launch_config(ROW))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"engine": "tgi"}, "engine must be one of"),
        ({"engine": "vllm", "kv_dtype": "q4"}, "not offered by vllm"),
        ({"engine": "sglang", "gpu_memory_fraction": 2.0}, "gpu_memory_fraction"),
        ({"engine": "vllm", "port": 0}, "port"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, match):
    with pytest.raises(ValueError, match=match):
        launch_config(ROW, **kwargs)
    with pytest.raises(ValueError, match="lacks batch"):
        launch_config({k: v for k, v in ROW.items() if k != "batch"})
    with pytest.raises(ValueError, match="weight format 'q4_k_m'"):
        launch_config(ROW | {"quant": "q4_k_m"}, engine="vllm")


def test_plan_cli_launch_prints_the_cheapest_plan_of_that_engine(capsys):
    from toolkit.__main__ import main

    question = ["plan", "--rate", "5", "--prompt-tokens", "512", "--output-tokens", "256", "--slo-ttft-ms", "2000",
                "--model", "Llama-3.1-8B", "--gpu", "L40S"]  # fmt: skip
    assert main([*question, "--launch", "vllm"]) == 0
    command = capsys.readouterr().out.strip()
    assert command.startswith("vllm serve meta-llama/Llama-3.1-8B --tensor-parallel-size 1 --max-num-seqs ")
    assert main([*question, "--launch", "llamacpp", "--launch-kubernetes"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["kind"] == "Deployment"
    assert main([*question[:-4], "--slo-ttft-ms", "1", "--launch", "vllm"]) == 2
    assert capsys.readouterr().err.startswith("error: no plan served by vllm meets the SLOs")
