"""A step's peak RSS in the run's record counts its worker processes (issue #36): ingest's
forked workers report their high-water marks and the record carries the step's own plus their
sum, as a pod's memory is the sum of its processes'."""
import os
import sys

import pytest

from pipelines import stopping

pytestmark = pytest.mark.unit

ROWS = 3000


def _ingest(src: str, out: str, workers: int) -> list:
    """The command of a task that ingests `src` with `workers` worker processes; it prints
    whether TFDV's statistics generators were imported when the workers were forked."""
    code = ("import sys; import components.ingest.logic as L; "
            "from components.ingest.test_logic import data; "
            "forking = L.Workers.__init__; "
            "L.Workers.__init__ = lambda self, *a, **k: (print('forked after the imports:', "
            "'tensorflow_data_validation.statistics.stats_impl' in sys.modules), forking(self, *a, **k))[1]; "
            "L.ingest_data(data(sys.argv[1]), sys.argv[2], workers=int(sys.argv[3]))")
    return [sys.executable, "-c", code, src, out, str(workers)]


def test_ingests_recorded_peak_rss_adds_its_workers(tmp_path, monkeypatch, capsys):
    """The workers are forked once the step imported TensorFlow and TFDV (each imported them
    itself before: 3 s of CPU a worker)."""
    from components.ingest.test_logic import HEADER, rows_text

    monkeypatch.setenv("PYTHONPATH", os.getcwd())
    src = tmp_path / "rows.csv"
    src.write_text(HEADER + rows_text(ROWS))
    assert stopping.run_task(_ingest(str(src), str(tmp_path / "one"), 0)) == 0
    alone = stopping.take_peak_rss_mb()
    assert stopping.run_task(_ingest(str(src), str(tmp_path / "two"), 2)) == 0
    with_workers = stopping.take_peak_rss_mb()
    assert "forked after the imports: True" in capsys.readouterr().out
    assert (tmp_path / "two" / "manifest.json").exists()
    # Each worker is forked once TensorFlow and TFDV are imported, and holds their pages (more
    # than 200 MB resident): the record adds two such processes to the step's own.
    assert alone > 200 and with_workers - alone > 2 * 200, (alone, with_workers)
    assert not [f for f in os.listdir("/tmp") if f.startswith("gpupipe-peak-rss-")  # nothing left behind
                and f.endswith(".workers") and os.path.getmtime(os.path.join("/tmp", f)) > src.stat().st_mtime]


def test_a_warm_tasks_figure_is_not_counted_twice(tmp_path):
    """wait4 reports the largest of a warm fork's and its workers' own peaks: the record then
    takes the fork's own as it wrote it, plus the workers'."""
    workers = tmp_path / "peak.workers"
    workers.write_text("500000 900000")  # the step's own then, its two workers' sum
    assert stopping._with_workers(450000, True, str(workers)) == 1400000
    assert stopping._with_workers(510000, False, str(workers)) == 1410000  # cold: its own at exit
    assert stopping._with_workers(510000, False, str(tmp_path / "none")) == 510000


def test_release_free_memory_hands_back_what_a_thread_freed(tmp_path):
    """What a thread allocated and then freed stays in its malloc arena, in the process's RSS,
    while live blocks sit between the free ones; release_free_memory (glibc's malloc_trim)
    gives those pages back, as evaluate does after its scoring pass."""
    import subprocess

    code = (
        "import threading\n"
        "from components import release_free_memory\n"
        "def rss():\n"
        "    with open('/proc/self/status') as f:\n"
        "        return next(int(l.split()[1]) for l in f if l.startswith('VmRSS')) // 1024\n"
        "blocks = []\n"
        "t = threading.Thread(target=lambda: blocks.extend(b'x' * 60_000 for _ in range(4000)))\n"
        "t.start(); t.join()\n"
        "kept = blocks[::20]  # one block in 20 stays live: the free ones lie between them\n"
        "before = rss(); del blocks; freed = rss()\n"
        "release_free_memory()\n"
        "print(before, freed, rss())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=os.getcwd(), timeout=60)
    assert out.returncode == 0, out.stderr
    before, freed, released = map(int, out.stdout.split())
    assert before - freed < 50, (before, freed)  # freed, yet still resident
    assert freed - released > 150, (before, freed, released)  # about 228 MB of the 240 handed back
