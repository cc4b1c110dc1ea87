"""The optional extras install together: pip's resolver finds one set of versions for
`vigor[gpu,trl]` (vLLM for `vigor train`, TRL for the multi-GPU path). Needs PyPI; slow
(the resolver fetches vLLM's and torch's CUDA wheels' metadata: minutes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_and_trl_extras_resolve_together(tmp_path):
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
         "--report", str(report), f"{ROOT}[gpu,trl]"],
        capture_output=True, text=True, timeout=1800,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    versions = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}
    from packaging.specifiers import SpecifierSet

    from vigor_cli.integrations.trl_versions import EXTRA

    assert versions["vllm"].startswith(("0.33.", "0.34.")) and versions["trl"] in SpecifierSet(EXTRA.removeprefix("trl"))
    assert "bitsandbytes" in versions and "torch" in versions
