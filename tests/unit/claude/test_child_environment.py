"""The child environment allowlist, forced scratch dirs, and the redacted log view."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from betcode.claude.environment import (
    REDACTED,
    InvalidAllowlistEntry,
    build_child_env,
    is_allowed,
    redact_env_for_log,
)

KEPT = [
    "HOME", "USER", "LOGNAME", "SHELL", "PATH", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ",
    "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_MODEL",
    "CLAUDE_CONFIG_DIR", "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "AWS_PROFILE", "AWS_REGION",
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_BEARER_TOKEN_BEDROCK",
    "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT", "CLOUD_ML_REGION",
    "VERTEX_REGION_CLAUDE_3_5_SONNET", "HTTP_PROXY", "https_proxy", "NO_PROXY", "no_proxy",
    "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "DISABLE_AUTOUPDATER", "DISABLE_TELEMETRY",
    "SSH_AUTH_SOCK", "USERPROFILE", "SYSTEMROOT", "MCP_TIMEOUT", "MAX_THINKING_TOKENS",
]  # fmt: skip
DROPPED = [
    "BETCODE_SOCKET", "GITHUB_TOKEN", "OPENAI_API_KEY", "DATABASE_URL", "LD_PRELOAD",
    "LD_LIBRARY_PATH", "PYTHONPATH", "NODE_OPTIONS", "PS1", "OLDPWD", "DISPLAY",
    "BETCODE_CLAUDE_BIN", "MY_SECRET", "XDG_SESSION_ID", "KUBECONFIG",
]  # fmt: skip


@pytest.mark.parametrize("name", KEPT)
def test_kept(name: str, tmp_path: Path) -> None:
    assert build_child_env({name: "v"}, tmp_path).get(name) == "v"


@pytest.mark.parametrize("name", DROPPED)
def test_dropped(name: str, tmp_path: Path) -> None:
    assert name not in build_child_env({name: "v"}, tmp_path)


def test_scratch_dirs_are_forced_and_private(tmp_path: Path) -> None:
    parent = {"TMPDIR": "/tmp", "XDG_RUNTIME_DIR": "/run/user/0", "CLAUDE_CODE_TMPDIR": "/x"}
    env = build_child_env(parent, tmp_path / "scratch")
    assert env["TMPDIR"] == env["CLAUDE_CODE_TMPDIR"] == str(tmp_path / "scratch" / "tmp")
    assert env["XDG_RUNTIME_DIR"] == str(tmp_path / "scratch" / "run")
    for directory in (tmp_path / "scratch", Path(env["TMPDIR"]), Path(env["XDG_RUNTIME_DIR"])):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700


def test_existing_scratch_dirs_are_made_private(tmp_path: Path) -> None:
    (tmp_path / "tmp").mkdir(mode=0o777)
    (tmp_path / "tmp").chmod(0o777)
    env = build_child_env({}, tmp_path)
    assert stat.S_IMODE(Path(env["TMPDIR"]).stat().st_mode) == 0o700


def test_extra_allow_takes_names_and_prefixes(tmp_path: Path) -> None:
    parent = {"GIT_AUTHOR_NAME": "a", "GIT_SSH_COMMAND": "b", "EDITOR": "vi", "GITX": "c"}
    env = build_child_env(parent, tmp_path, extra_allow=["GIT_*", "EDITOR"])
    assert {name for name in parent if name in env} == {
        "GIT_AUTHOR_NAME",
        "GIT_SSH_COMMAND",
        "EDITOR",
    }
    assert is_allowed("GIT_DIR", ["GIT_*"])
    assert not is_allowed("GIT_DIR")


@pytest.mark.parametrize("entry", ["", "*", "A B", "FOO*BAR", "1ABC", "A-B"])
def test_bad_allowlist_entries_are_refused(entry: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidAllowlistEntry, match="allowlist entry"):
        build_child_env({}, tmp_path, extra_allow=[entry])


SECRETS = {
    "ANTHROPIC_API_KEY": "sk-ant-api03-secretvalue1",
    "ANTHROPIC_AUTH_TOKEN": "secretvalue2",
    "ANTHROPIC_CUSTOM_HEADERS": "Authorization: Bearer secretvalue3",
    "AWS_SECRET_ACCESS_KEY": "secretvalue4",
    "AWS_ACCESS_KEY_ID": "AKIAsecretvalue5",
    "AWS_SESSION_TOKEN": "secretvalue6",
    "AWS_BEARER_TOKEN_BEDROCK": "secretvalue7",
    "CLAUDE_CODE_OAUTH_TOKEN": "secretvalue8",
    "DB_PASSWORD": "secretvalue9",
    "GOOGLE_APPLICATION_CREDENTIALS": "/home/u/secretvalue10.json",
    "HTTPS_PROXY": "http://user:secretvalue11@proxy.local:3128",
    "http_proxy": "https://secretvalue12@proxy.local",
}
PLAIN = {
    "PATH": "/usr/bin:/bin",
    "ANTHROPIC_BASE_URL": "http://127.0.0.1:8080",
    "CLAUDE_CODE_USE_BEDROCK": "1",
    "NO_PROXY": "localhost,127.0.0.1",
    "HOME": "/home/u",
}


def test_redacted_view_names_everything_and_leaks_no_secret() -> None:
    shown = redact_env_for_log({**SECRETS, **PLAIN})
    assert set(shown) == set(SECRETS) | set(PLAIN)
    text = repr(shown)
    for secret in SECRETS.values():
        for fragment in ("secretvalue", secret):
            assert fragment not in text
    assert shown["ANTHROPIC_API_KEY"] == REDACTED
    assert shown["HTTPS_PROXY"] == f"http://{REDACTED}@proxy.local:3128"


def test_redacted_view_keeps_plain_values() -> None:
    assert redact_env_for_log(PLAIN) == PLAIN


def test_empty_secret_shows_as_empty() -> None:
    assert redact_env_for_log({"ANTHROPIC_API_KEY": ""}) == {"ANTHROPIC_API_KEY": ""}
