"""The default report folder: a second report of the same day writes beside the first."""

from toolkit._report.build import unused_folder


def test_a_fresh_or_empty_folder_is_used_as_named(tmp_path):
    assert unused_folder(tmp_path, "2026-01-02-x") == tmp_path / "2026-01-02-x"
    (tmp_path / "2026-01-02-x").mkdir()
    assert unused_folder(tmp_path, "2026-01-02-x") == tmp_path / "2026-01-02-x"


def test_a_folder_holding_a_report_is_not_reused(tmp_path):
    for name in ("2026-01-02-x", "2026-01-02-x-2"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "index.html").write_text("earlier report")
    assert unused_folder(tmp_path, "2026-01-02-x") == tmp_path / "2026-01-02-x-3"
    assert (tmp_path / "2026-01-02-x" / "index.html").read_text() == "earlier report"
