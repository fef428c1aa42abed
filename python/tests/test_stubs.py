"""The type stubs (moe_paging_sim/*.pyi) match the module as built: mypy's stubtest."""

import subprocess
import sys

import pytest


def test_stubs_match_the_runtime(tmp_path):
    pytest.importorskip("mypy")
    # pandas ships no stubs of its own; to_pandas's return type needs none to be checked
    (tmp_path / "mypy.ini").write_text("[mypy]\nignore_missing_imports = True\n")
    out = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "moe_paging_sim",
         "--mypy-config-file", str(tmp_path / "mypy.ini")],
        cwd=tmp_path, capture_output=True, text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
