"""The child `claude` environment: an allowlist, plus per-daemon scratch directories.

Kept (what Claude Code needs for a real user's login, providers and the tools it runs):

* identity and shell: HOME (its ~/.claude login lives there), USER, LOGNAME, SHELL, PATH,
  TERM, COLORTERM, TZ, LANG, LANGUAGE, LC_*, SSH_AUTH_SOCK (git over ssh in the Bash tool),
  XDG_CONFIG_HOME / XDG_DATA_HOME / XDG_CACHE_HOME / XDG_STATE_HOME (where the user's tools keep
  their settings);
* Windows essentials: USERPROFILE, APPDATA, LOCALAPPDATA, SYSTEMROOT, SYSTEMDRIVE, WINDIR,
  COMSPEC, PATHEXT, PROGRAMFILES, PROGRAMDATA;
* Claude Code itself: ANTHROPIC_* (API key, auth token, base URL, custom headers, models),
  CLAUDE_* (CLAUDE_CONFIG_DIR, CLAUDE_CODE_USE_BEDROCK / _VERTEX / _FOUNDRY and every other
  CLAUDE_CODE_* switch), DISABLE_* (autoupdater, telemetry, error reporting, ...), MCP_TIMEOUT,
  MCP_TOOL_TIMEOUT, MAX_THINKING_TOKENS, BASH_DEFAULT_TIMEOUT_MS, BASH_MAX_TIMEOUT_MS,
  BASH_MAX_OUTPUT_LENGTH, USE_BUILTIN_RIPGREP, IS_SANDBOX;
* providers: AWS_* (Bedrock credentials, profile, region, bearer token), GOOGLE_* and
  GCLOUD_PROJECT (Vertex credentials and project), CLOUD_ML_*, VERTEX_*;
* network: HTTP_PROXY, HTTPS_PROXY, NO_PROXY, ALL_PROXY in both cases, NODE_EXTRA_CA_CERTS,
  SSL_CERT_FILE, SSL_CERT_DIR;
* anything the user adds (`extra_allow`: exact names, or prefixes written `NAME_*`).

Everything else is dropped. CLAUDE_CODE_TMPDIR and TMPDIR are forced to <scratch>/tmp and
XDG_RUNTIME_DIR to <scratch>/run (both 0700): the CLI's task outputs, image copies, cwd-tracking
files and per-process sockets then stay inside the daemon's data dir
(docs/PROTOCOL.md#starting-claude).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

ALLOWED_NAMES = frozenset(
    {
        "HOME", "USER", "LOGNAME", "SHELL", "PATH", "TERM", "COLORTERM", "TZ", "LANG",
        "LANGUAGE", "SSH_AUTH_SOCK", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME",
        "XDG_STATE_HOME",
        "USERPROFILE", "APPDATA", "LOCALAPPDATA", "SYSTEMROOT", "SYSTEMDRIVE", "WINDIR",
        "COMSPEC", "PATHEXT", "PROGRAMFILES", "PROGRAMDATA",
        "MCP_TIMEOUT", "MCP_TOOL_TIMEOUT", "MAX_THINKING_TOKENS", "BASH_DEFAULT_TIMEOUT_MS",
        "BASH_MAX_TIMEOUT_MS", "BASH_MAX_OUTPUT_LENGTH", "USE_BUILTIN_RIPGREP", "IS_SANDBOX",
        "GCLOUD_PROJECT",
        "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY",
        "http_proxy", "https_proxy", "no_proxy", "all_proxy",
        "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "SSL_CERT_DIR",
    }
)  # fmt: skip
ALLOWED_PREFIXES = (
    "LC_",
    "ANTHROPIC_",
    "CLAUDE_",
    "DISABLE_",
    "AWS_",
    "GOOGLE_",
    "CLOUD_ML_",
    "VERTEX_",
)
SCRATCH_TMP = "tmp"
SCRATCH_RUN = "run"
FORCED_TMP_NAMES = ("CLAUDE_CODE_TMPDIR", "TMPDIR")
FORCED_RUNTIME_NAME = "XDG_RUNTIME_DIR"

REDACTED = "<redacted>"
_SECRET_NAME = re.compile(
    r"KEY|TOKEN|SECRET|PASS|CREDENTIAL|AUTH|HEADER|COOKIE|PRIVATE|SIGNATURE|SESSION",
    re.IGNORECASE,
)
# user:password@ inside a URL (proxies are a common place for it).
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@")


class InvalidAllowlistEntry(ValueError):
    """An `extra_allow` entry that is not an environment name or a `PREFIX_*` pattern."""


_ENTRY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\*?")


def _split_extra(extra_allow: Sequence[str]) -> tuple[frozenset[str], tuple[str, ...]]:
    names: set[str] = set()
    prefixes: list[str] = []
    for entry in extra_allow:
        if not _ENTRY.fullmatch(entry):
            raise InvalidAllowlistEntry(
                f"environment allowlist entry {entry!r} is neither a variable name nor a "
                "prefix pattern such as MY_TOOL_*"
            )
        if entry.endswith("*"):
            prefixes.append(entry[:-1])
        else:
            names.add(entry)
    return frozenset(names), tuple(prefixes)


def is_allowed(name: str, extra_allow: Sequence[str] = ()) -> bool:
    """Whether `name` passes the allowlist (the built-in one plus `extra_allow`)."""
    extra_names, extra_prefixes = _split_extra(extra_allow)
    return _allowed(name, extra_names, extra_prefixes)


def _allowed(name: str, extra_names: frozenset[str], extra_prefixes: tuple[str, ...]) -> bool:
    return (
        name in ALLOWED_NAMES
        or name in extra_names
        or name.startswith(ALLOWED_PREFIXES)
        or (bool(extra_prefixes) and name.startswith(extra_prefixes))
    )


def _private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)  # mkdir's mode is masked by umask and ignored for existing dirs
    return path


def build_child_env(
    parent: Mapping[str, str],
    scratch_dir: Path,
    extra_allow: Sequence[str] = (),
) -> dict[str, str]:
    """The environment for a claude child: allowlisted names from `parent`, forced scratch dirs."""
    extra_names, extra_prefixes = _split_extra(extra_allow)
    env = {
        name: value for name, value in parent.items() if _allowed(name, extra_names, extra_prefixes)
    }
    scratch_dir = _private_dir(Path(scratch_dir).absolute())
    tmp_dir = str(_private_dir(scratch_dir / SCRATCH_TMP))
    for name in FORCED_TMP_NAMES:
        env[name] = tmp_dir
    env[FORCED_RUNTIME_NAME] = str(_private_dir(scratch_dir / SCRATCH_RUN))
    return env


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def redact_env_for_log(env: Mapping[str, str]) -> dict[str, str]:
    """A copy safe to log: every name, no secret value, no credentials inside URLs."""
    shown: dict[str, str] = {}
    for name in sorted(env):
        value = env[name]
        if is_secret_name(name):
            shown[name] = REDACTED if value else ""
        else:
            shown[name] = _URL_USERINFO.sub(rf"\g<scheme>{REDACTED}@", value)
    return shown
