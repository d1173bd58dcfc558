import os

import pytest

from encdec.errors import ConfigError
from encdec.sizing import chinchilla


def test_rot5_token_budget_gives_the_seeds_compute_and_48m_parameters():
    point = chinchilla(tokens=2 * 684_805_492)
    assert point.flops == pytest.approx(3.65e17, rel=0.002)
    assert round(point.params / 1e6) == 48


@pytest.mark.parametrize("given", ["flops", "tokens", "params"])
def test_each_input_round_trips_through_the_fits(given):
    point = chinchilla(flops=1e20)
    again = chinchilla(**{given: getattr(point, given)})
    assert again.flops == pytest.approx(1e20) and again.params == pytest.approx(point.params)
    assert again.flops_6nd == pytest.approx(6 * 0.18 * 1e20)


def test_exactly_one_value_is_required():
    with pytest.raises(ConfigError, match="exactly one positive value"):
        chinchilla(flops=1e20, tokens=1e9)


@pytest.mark.parametrize(
    "busy, threads, warned, suggested",
    [
        (0.1, 4, False, None),
        (3.0, 2, True, 1),
        (2.2, 2, False, None),
        (2.6, 2, True, 1),
        (6.0, 4, True, 1),
        (9, 1, False, None),
    ],
)
def test_threads_beyond_the_cores_others_leave_free_are_warned_once(
    monkeypatch, caplog, busy, threads, warned, suggested
):
    """On 4 cores: 3 kept busy leave 1 free, so 2 threads would wait on each other; one thread never warns."""
    from encdec import sizing

    monkeypatch.setattr(sizing.os, "cpu_count", lambda: 4)
    with caplog.at_level("WARNING", logger="encdec.sizing"):
        assert sizing.warn_if_oversubscribed(threads, "training.threads", busy=busy) is warned
    assert len(caplog.records) == int(warned)
    if warned:
        assert (
            f"set training.threads to {suggested}," in caplog.text and f"{busy:.1f} of this machine's 4" in caplog.text
        )


def test_busy_cores_sees_a_process_spinning_beside_this_one():
    """A second process busy on one core shows as about one busy core (where /proc/stat exists)."""
    import subprocess
    import sys

    from encdec.sizing import busy_cores

    if busy_cores(0.05) is None:
        pytest.skip("this system has no /proc/stat")
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        import time

        time.sleep(0.3)
        measured = busy_cores(0.5)
    finally:
        spinner.kill()
    assert 0.7 <= measured <= (os.cpu_count() or 1)


@pytest.mark.parametrize(
    "busy, processes, chosen",
    [(0.0, 1, 4), (1.2, 1, 3), (3.9, 1, 1), (0.0, 2, 2), (2.0, 4, 1), (None, 1, 4)],
)
def test_threads_not_set_are_the_cores_others_leave_free(monkeypatch, caplog, busy, processes, chosen):
    """On 4 cores, with no OMP_NUM_THREADS: the free cores (all 4 where the system does not say), shared among
    this machine's processes, and said."""
    from encdec import sizing

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(sizing.os, "cpu_count", lambda: 4)
    monkeypatch.setattr(sizing, "available_cores", lambda: 4)
    monkeypatch.setattr(sizing, "busy_cores", lambda: busy)
    with caplog.at_level("INFO", logger="encdec.sizing"):
        assert sizing.choose_threads(None, "training.threads", processes=processes) == chosen
    assert f"training.threads not set: {chosen} thread" in caplog.text


def test_threads_asked_kept_or_given_by_omp_num_threads_are_not_chosen(monkeypatch):
    from encdec import sizing

    monkeypatch.setattr(sizing, "available_cores", lambda: 4)
    monkeypatch.setattr(sizing, "busy_cores", lambda: 3.0)
    monkeypatch.setattr(sizing.os, "cpu_count", lambda: 4)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert sizing.choose_threads(None, "training.threads") is None  # torch's, as OMP_NUM_THREADS says
    assert sizing.choose_threads(2, "training.threads") == 2  # asked (and warned: 1 core is free)
    assert sizing.choose_threads(8, "training.threads") == 4  # asked, capped at the cores
    assert sizing.choose_threads(None, "training.threads", kept=3) == 3  # a resumed run's own
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert sizing.choose_threads(None, "training.threads", kept=3) == 3  # kept, whatever the load now
