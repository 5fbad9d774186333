"""Config dir, data dir and socket path for each environment and platform combination."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from betcode.config.dirs import config_dir, data_dir, default_socket_path

ENV = ("BETCODE_CONFIG_DIR", "BETCODE_DATA_DIR", "BETCODE_SOCKET", "XDG_CONFIG_HOME",
       "XDG_DATA_HOME", "XDG_RUNTIME_DIR", "USERPROFILE")  # fmt: skip


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.mark.parametrize(
    ("platform", "env", "expected"),
    [
        ("linux", {}, "HOME/.config/betcode"),
        ("linux", {"XDG_CONFIG_HOME": "/xdg"}, "/xdg/betcode"),
        ("linux", {"XDG_CONFIG_HOME": ""}, "HOME/.config/betcode"),
        ("linux", {"XDG_CONFIG_HOME": "relative/xdg"}, "HOME/.config/betcode"),
        ("linux", {"BETCODE_CONFIG_DIR": "/explicit", "XDG_CONFIG_HOME": "/xdg"}, "/explicit"),
        ("darwin", {}, "HOME/Library/Application Support/betcode"),
        ("darwin", {"XDG_CONFIG_HOME": "/xdg"}, "HOME/Library/Application Support/betcode"),
        ("darwin", {"BETCODE_CONFIG_DIR": "/explicit"}, "/explicit"),
        ("win32", {"USERPROFILE": "/users/me"}, "/users/me/.betcode"),
        ("win32", {}, "HOME/.betcode"),
        ("win32", {"BETCODE_CONFIG_DIR": "/explicit"}, "/explicit"),
    ],
)
def test_config_dir(
    monkeypatch: pytest.MonkeyPatch,
    clean_env: Path,
    platform: str,
    env: dict[str, str],
    expected: str,
) -> None:
    monkeypatch.setattr(sys, "platform", platform)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert config_dir() == Path(expected.replace("HOME", str(clean_env)))


def test_relative_and_tilde_overrides_become_absolute(
    monkeypatch: pytest.MonkeyPatch, clean_env: Path, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BETCODE_CONFIG_DIR", "rel/cfg")
    monkeypatch.setenv("BETCODE_DATA_DIR", "~/data")
    assert config_dir() == tmp_path / "rel" / "cfg"
    assert data_dir() == clean_env / "data"


def test_data_dir_default_follows_xdg(monkeypatch: pytest.MonkeyPatch, clean_env: Path) -> None:
    assert data_dir() == clean_env / ".local" / "share" / "betcode"
    monkeypatch.setenv("XDG_DATA_HOME", "/xdg-data")
    assert data_dir() == Path("/xdg-data/betcode")
    monkeypatch.setenv("BETCODE_DATA_DIR", "/explicit-data")
    assert data_dir() == Path("/explicit-data")


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "/cfg/daemon.sock"),
        ({"XDG_RUNTIME_DIR": "/run/user/1000"}, "/run/user/1000/betcode/daemon.sock"),
        ({"XDG_RUNTIME_DIR": ""}, "/cfg/daemon.sock"),
        ({"BETCODE_SOCKET": "/s/d.sock", "XDG_RUNTIME_DIR": "/run/user/1"}, "/s/d.sock"),
    ],
)
def test_socket_path(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert default_socket_path(Path("/cfg")) == Path(expected)
