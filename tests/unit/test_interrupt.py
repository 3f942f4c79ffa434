"""GracefulStop: SIGTERM / SIGINT become a request that finishes the step and an exit code of 128 + signal; forked data
workers die on SIGTERM and leave SIGINT to the parent."""

import multiprocessing
import os
import signal
import time

import pytest

from bertkit.training.interrupt import GracefulStop, Interrupted


@pytest.mark.parametrize("first,second", [(signal.SIGTERM, signal.SIGINT), (signal.SIGINT, signal.SIGTERM)])
def test_signal_is_a_request_and_raise_gives_the_exit_code(first, second):
    """Either signal is a request (the recipes' end-to-end stops send SIGTERM); a second one, as while the
    checkpoint is being saved, is counted, not acted on; the exit code is the first's."""
    before = signal.getsignal(signal.SIGINT)
    with GracefulStop() as stop:
        assert not stop.requested
        os.kill(os.getpid(), first)
        time.sleep(0.05)
        assert stop.requested and stop.signum == first
        os.kill(os.getpid(), second)
        time.sleep(0.05)
        assert stop.count == 2 and stop.signum == first
        with pytest.raises(Interrupted, match="resume") as e:
            stop.raise_("run again with --resume")
    assert e.value.exit_code == 128 + first
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored
    assert signal.getsignal(signal.SIGINT) is before


def test_a_forked_worker_still_dies_on_sigterm():
    """Workers forked inside GracefulStop (corpus pools) inherit its handler; they must still die on SIGTERM,
    or pool.terminate() hangs forever."""
    ctx = multiprocessing.get_context("fork")
    with GracefulStop() as stop:
        child = ctx.Process(target=time.sleep, args=(30,))
        child.start()
        time.sleep(0.2)
        os.kill(child.pid, signal.SIGTERM)
        child.join(10)
        alive = child.is_alive()
        if alive:
            child.kill()
            child.join()
        assert not alive and child.exitcode == -signal.SIGTERM
        assert not stop.requested


def test_a_forked_worker_ignores_sigint_which_is_the_parents():
    ctx = multiprocessing.get_context("fork")
    with GracefulStop() as stop:
        child = ctx.Process(target=time.sleep, args=(1.0,))
        child.start()
        time.sleep(0.2)
        os.kill(child.pid, signal.SIGINT)
        child.join(10)
        assert child.exitcode == 0  # finished its work
        assert not stop.requested


def test_the_agreed_stop_puts_a_signal_before_a_spent_budget():
    """GracefulStop.agreed, every run's one stop agreement (one process here; under torchrun a mean over the ranks,
    test_multinode): nothing, a spent time budget, and a signal, which wins over the budget."""
    from bertkit.training.distributed import DistContext

    ctx = DistContext()
    with GracefulStop() as stop:
        assert stop.agreed(ctx) is None
        assert stop.agreed(ctx, spent=True) == "time"
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.agreed(ctx) == "signal" and stop.agreed(ctx, spent=True) == "signal"
