"""The committed betcode.v1 package must be exactly what scripts/gen_proto makes from proto/."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "src" / "betcode" / "v1"


def _generated_files(package_dir: Path) -> dict[str, bytes]:
    return {
        path.name: path.read_bytes()
        for path in sorted(package_dir.iterdir())
        if path.is_file() and path.suffix in {".py", ".pyi"}
    }


def test_generated_code_matches_the_proto_files(tmp_path: Path) -> None:
    subprocess.run(
        [str(REPO / "scripts" / "gen_proto"), str(tmp_path)],
        env={**os.environ, "PYTHON": sys.executable},
        check=True,
        capture_output=True,
    )
    fresh = _generated_files(tmp_path / "betcode" / "v1")
    committed = _generated_files(COMMITTED)

    assert sorted(fresh) == sorted(committed), "run scripts/gen_proto: the set of modules changed"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"run scripts/gen_proto: stale generated code in {stale}"
