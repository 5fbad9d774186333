"""The web client's end-to-end tests (web-client/test/e2e.test.ts) run against vectors made by
the daemon's Python implementation: the committed file must be what scripts/e2e_vectors.py
makes now, so a change to either side of the scheme fails here or there."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_browsers_vectors_are_the_python_implementations() -> None:
    script = ROOT / "scripts" / "e2e_vectors.py"
    made = subprocess.run(
        [sys.executable, str(script)], check=True, capture_output=True, text=True
    ).stdout
    committed = (ROOT / "web-client" / "test" / "e2e-vectors.json").read_text()
    assert json.loads(committed) == json.loads(made), (
        "regenerate: .venv/bin/python scripts/e2e_vectors.py > web-client/test/e2e-vectors.json"
    )
