"""The child-process runner the studies use: a deadline (--max-time-per-run) and a stop request end the child with
SIGTERM, its output lands in the log, and a killed study's child does not outlive it."""

from __future__ import annotations

import signal
import sys
import time
from types import SimpleNamespace

import pytest

from bertkit.experiments import runner


@pytest.fixture
def fake_child(monkeypatch):
    def use(code: str):
        monkeypatch.setattr(runner, "bertkit_argv", lambda args: [sys.executable, "-c", code])

    return use


def test_deadline_sends_sigterm(fake_child, tmp_path):
    fake_child("import time; print('started', flush=True); time.sleep(60)")
    t0 = time.perf_counter()
    r = runner.run_bertkit(["x"], log=tmp_path / "child.log", max_time=1.0, poll=0.05)
    assert r.timed_out and not r.stopped and r.code == -signal.SIGTERM
    assert time.perf_counter() - t0 < 30
    assert (tmp_path / "child.log").read_text().startswith("started")


def test_stop_request_ends_the_child(fake_child):
    fake_child("import time; time.sleep(60)")
    stop = SimpleNamespace(requested=True)
    r = runner.run_bertkit(["x"], stop=stop, poll=0.05)
    assert r.stopped and not r.timed_out and r.code == -signal.SIGTERM


def test_child_finishing_normally(fake_child, tmp_path):
    fake_child("import sys; print('hello'); sys.exit(3)")
    r = runner.run_bertkit(["x"], log=tmp_path / "log")
    assert r.code == 3 and not r.timed_out and not r.stopped
    assert runner.log_tail(r) == "hello"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_child_dies_with_a_killed_parent(tmp_path):
    """The child ignores SIGTERM, as a run finishing its step and saving does: it must die all the same, or it goes on
    writing into a cell that the resumed study has already cleared and started again."""
    import os
    import subprocess

    pidfile = tmp_path / "child.pid"
    (tmp_path / "child.py").write_text(
        "import os, signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"open({str(pidfile)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n"
    )
    (tmp_path / "parent.py").write_text(
        "import sys\nfrom bertkit.experiments import runner\n"
        f"runner.bertkit_argv = lambda a: [sys.executable, {str(tmp_path / 'child.py')!r}]\n"
        "runner.run_bertkit(['x'])\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    parent = subprocess.Popen([sys.executable, str(tmp_path / "parent.py")], env=env)
    t0 = time.time()
    while not pidfile.exists() or not pidfile.read_text():
        assert time.time() - t0 < 30
        time.sleep(0.05)
    child = int(pidfile.read_text())
    parent.kill()
    parent.wait()
    t0 = time.time()
    while True:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        try:  # reap if it became our zombie (it is not our child: it is re-parented to init)
            os.waitpid(child, os.WNOHANG)
        except ChildProcessError:
            pass
        assert time.time() - t0 < 10, "the child outlived its killed parent"
        time.sleep(0.05)
