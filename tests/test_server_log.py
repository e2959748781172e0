"""The iteration table read from llama-server's debug log (toolkit._sweep.server_log).

``data/llama_server_iterations.log`` is a stretch of a real log (llama-server as ``make install``
builds it, ``-lv 5 --log-timestamps --log-prefix``, held-out replay, 2026-12-05), with the prompt
cache's listings left out. In it, slot 2 decodes its tokens 71-73 while slot 3 takes a 55-token
prompt whose first token it restores from a checkpoint: 50 tokens from position 1, then the last 4
from position 51, then slot 3 decodes alone. The expected rows are read off the log by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit._sweep.server_log import server_iterations

LOG = Path(__file__).parent / "data" / "llama_server_iterations.log"


def test_iterations_are_read_off_the_log():
    table = server_iterations(LOG)
    # the fifth iteration (decode: at 35.938517) is still running where the excerpt ends: left out
    assert len(table) == 4
    # decode: lines at 0.35.569.445, .608.978, .825.927, .894.817; each ends at the next posting
    assert table["start_s"].tolist() == pytest.approx([35.569445, 35.608978, 35.825927, 35.894817], abs=1e-6)
    assert table["step_ms"].tolist() == pytest.approx([38.225, 216.578, 68.866, 43.674], abs=1e-3)
    # slot 2 logs n_tokens 70, 71, 72 (its new token attends to one more); slot 3 logs 55
    assert table["decode_seqs"].tolist() == [1, 1, 1, 1]
    assert table["kv_tokens"].tolist() == [71, 72, 73, 56]
    # slot 3's prompt: [1, 51) beside slot 2's decode, then [51, 55), which ends it (init sampler)
    assert table["prefill_tokens"].tolist() == [0, 50, 4, 0]
    assert table["prefill_context_tokens"].tolist() == [0, 1, 51, 0]
    assert table["prefill_chunks"].tolist() == [0, 1, 1, 0]
    assert table["last_chunks"].tolist() == [0, 0, 1, 0]


def test_a_log_without_iterations_is_refused(tmp_path):
    plain = tmp_path / "server.log"
    plain.write_text("main: server is listening on http://127.0.0.1:8080\n")
    with pytest.raises(ValueError, match="log_path holds no llama-server iteration"):
        server_iterations(plain)
