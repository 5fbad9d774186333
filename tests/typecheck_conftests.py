"""For mypy only, never imported: the conftest.py files below tests/, by their package paths.

mypy names a tests/ module as pytest's prepend import mode does, by its file name (tests/ and
each test folder are on sys.path, so helpers import as `harness.daemon` or `store_helpers`).
That makes every conftest.py "conftest", which mypy refuses to check twice, so pyproject.toml
excludes the nested ones from its files and they are checked through these imports instead.
A new folder's conftest.py goes here too.
"""

# ruff: noqa: F401  # imported for mypy to follow, never used
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import conformance.conftest
    import faults.conftest
    import unit.cli.conftest
    import unit.permissions.conftest
    import unit.server.conftest
    import unit.sessions.conftest
    import unit.storage.conftest
    import worktrees.conftest
