"""The hang watchdog of the suite (tests/hang_watchdog.py), run on a pytest of its own: a hung async test fails
with its name and the await it hung in, and the tests after it still run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HUNG = '''
import asyncio

import pytest


async def wait_for_good():
    await asyncio.Event().wait()


@pytest.fixture
async def hangs_at_teardown():
    yield
    await wait_for_good()


@pytest.mark.hang_limit(1.0)
async def test_hangs():
    await wait_for_good()


@pytest.mark.hang_limit(1.0)
async def test_its_fixture_hangs(hangs_at_teardown):
    pass


def test_after_it():
    pass
'''


def test_a_hung_async_test_fails_with_its_name_and_await_and_the_run_goes_on(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text("from tests.hang_watchdog import pytest_runtest_call, pytest_runtest_setup, "
                                          "pytest_runtest_teardown  # noqa: F401\n")
    (tmp_path / "test_hung.py").write_text(HUNG)
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "asyncio_mode=auto",
                          "-o", "markers=hang_limit", "--rootdir", str(tmp_path), str(tmp_path)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "HUNG TEST: test_hung.py::test_hangs (call) still running after 1 s" in out, out
    assert "HUNG TEST: test_hung.py::test_its_fixture_hangs (teardown) still running after 1 s" in out, out
    assert "in wait_for_good" in out, out  # the await it hung in
    assert "1 failed, 2 passed, 1 error" in out, out
