"""numpy's BLAS runs on ``blas_threads`` threads in the server (rtc_agent/worker/blas_threads.py): its spinning
helper threads took the cores the engines need."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rtc_agent.config import Settings, SettingsError
from rtc_agent.config.validation import validate
from rtc_agent.worker.blas_threads import blas_threads, limit_blas_threads


@pytest.fixture
def restore_blas():
    """Put the BLAS thread counts back as they were after the test."""
    before = blas_threads()
    yield before
    if before:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=before[0]["threads"], user_api="blas")


def test_numpy_blas_is_found():
    found = blas_threads()
    assert found, "numpy's BLAS library was not found (threadpoolctl)"
    assert all(b["library"] and b["threads"] >= 1 for b in found)


def test_limit_sets_every_blas_library_and_zero_leaves_it(restore_blas):
    assert [b["threads"] for b in limit_blas_threads(1)] == [1] * len(restore_blas)
    assert [b["threads"] for b in blas_threads()] == [1] * len(restore_blas)
    assert limit_blas_threads(0) == blas_threads()  # 0: left as it is
    a = np.random.default_rng(0).standard_normal((201, 80)).astype(np.float32)
    assert np.allclose(a.T @ a, (a.T @ a).T, atol=1e-4)  # products still work on one thread
    with pytest.raises(ValueError):
        limit_blas_threads(-1)


@pytest.mark.parametrize("bad", [-1, 65, 1.5])
def test_setting_is_validated(bad):
    with pytest.raises(SettingsError, match="blas_threads"):
        validate(dataclasses.replace(Settings(), blas_threads=bad))


async def test_a_started_server_runs_numpy_blas_on_the_setting(start_server, restore_blas):
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=2, user_api="blas")  # as numpy starts on a 2-core machine
    await start_server(blas_threads=1)
    assert [b["threads"] for b in blas_threads()] == [1] * len(restore_blas)
