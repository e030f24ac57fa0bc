"""Progress bars in a log file or pipe: whole lines, no carriage-return redraws, the final state."""
import io
import subprocess
import sys

from graphattn.utils import progress
from graphattn.utils.progress import progress_bar


def test_a_bar_into_a_file_writes_few_whole_lines(monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr(progress, "LOG_INTERVAL", 3600.0)
    bar = progress_bar(range(500), desc="featurize", file=log)
    for _ in bar:
        bar.set_postfix(loss=1.0, refresh=False)
    bar.close()
    text = log.getvalue()
    assert "\r" not in text and text.endswith("\n")
    lines = text.splitlines()
    assert len(lines) <= 3 and "500/500" in lines[-1] and lines[-1].startswith("featurize: 100%")


def test_a_disabled_bar_writes_nothing():
    log = io.StringIO()
    assert list(progress_bar(range(3), file=log, disable=True)) == [0, 1, 2] and log.getvalue() == ""


def test_a_training_run_logged_to_a_file_has_no_redraw_fragments(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "graphattn", "train", "karate", "--epochs", "30", "--threads", "1",
                           "--out", str(tmp_path / "k")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "\r" not in proc.stderr and len(proc.stderr) < 2000, proc.stderr[-500:]
    assert "30/30" in proc.stderr
