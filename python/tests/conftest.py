"""Shared fixtures: the repository root (tests run from it, so trace paths read as the CLI's
README gives them) and the `sim` binary whose --json output the package must reproduce."""

import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROSE = "traces/data/granite/prose.bin"


@pytest.fixture(scope="session")
def sim_bin():
    """The `sim` binary: $SIM_BIN, else target/{debug,release}/sim built by cargo (CI's test
    step has built the debug one already, so this is a no-op there)."""
    given = os.environ.get("SIM_BIN")
    if given:
        return given
    subprocess.run(
        ["cargo", "build", "--locked", "-p", "sim", "--bin", "sim"], cwd=ROOT, check=True
    )
    return str(ROOT / "target" / "debug" / "sim")


@pytest.fixture(autouse=True)
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


@pytest.fixture
def cli(sim_bin):
    """Run `sim ARGS...` from the repository root; its stdout parsed as JSON."""

    def call(*args):
        out = subprocess.run(
            [sim_bin, *args], cwd=ROOT, check=True, capture_output=True, text=True
        )
        return json.loads(out.stdout)

    return call
