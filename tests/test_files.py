"""Reading user files: regular files only, never blocking, bounded."""

from __future__ import annotations

import os
import threading

import pytest

from toolkit._files import read_user_bytes, read_user_text


def test_a_regular_file_is_read_whole_and_a_bom_dropped(tmp_path):
    path = tmp_path / "a.json"
    path.write_bytes(b"\xef\xbb\xbf{}")
    assert read_user_text("config", path, max_bytes=10) == "{}"
    assert read_user_bytes("config", path, max_bytes=5) == b"\xef\xbb\xbf{}"


def test_a_file_over_the_bound_is_refused_naming_argument_file_and_bound(tmp_path):
    path = tmp_path / "big.txt"
    path.write_bytes(b"x" * 101)
    with pytest.raises(ValueError, match=r"prompts: .*big\.txt has 101 bytes; at most 100"):
        read_user_bytes("prompts", path, max_bytes=100)


def test_a_fifo_is_refused_at_once_rather_than_waited_on(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            read_user_bytes("config", fifo, max_bytes=100)
        except ValueError as exc:
            outcome.append(exc)

    worker = threading.Thread(target=read, daemon=True)
    worker.start()
    worker.join(5)
    assert not worker.is_alive(), "reading a FIFO with no writer blocked"
    assert "not a regular file" in str(outcome[0])


@pytest.mark.parametrize("path", ["/dev/zero", "/"])
def test_devices_and_directories_are_refused(path):
    with pytest.raises(ValueError, match="not a regular file"):
        read_user_bytes("config", path, max_bytes=100)


def test_missing_and_undecodable_files_name_the_file(tmp_path):
    with pytest.raises(ValueError, match=r"config: no such file: .*nope"):
        read_user_bytes("config", tmp_path / "nope", max_bytes=100)
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"caf\xe9")
    with pytest.raises(ValueError, match=r"latin1\.txt is not UTF-8 text \(byte 3\)"):
        read_user_text("prompts", bad, max_bytes=100)
