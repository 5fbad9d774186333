"""`betcode permissions answer`: how typed answers become the answers claude receives."""

from __future__ import annotations

import pytest

from betcode.cli.permissions_cmd import describe_questions, resolve_answer
from betcode.v1 import agent_pb2, common_pb2


def prompt(multi: bool = False) -> agent_pb2.QuestionPrompt:
    return agent_pb2.QuestionPrompt(
        question="Which database?",
        multi_select=multi,
        options=[
            common_pb2.QuestionOption(label="Postgres", description="the usual"),
            common_pb2.QuestionOption(label="SQLite"),
            common_pb2.QuestionOption(label="MySQL"),
        ],
    )


@pytest.mark.parametrize(
    ("multi", "given", "answer"),
    [
        (False, "1", "Postgres"),
        (False, "3", "MySQL"),
        (False, "sqlite", "SQLite"),
        (False, "  SQLite ", "SQLite"),
        (False, "4", "4"),  # not an option number: the user's own answer
        (False, "0", "0"),
        (False, "DuckDB, please", "DuckDB, please"),  # single choice: commas are text
        (True, "1,3", "Postgres, MySQL"),
        (True, "sqlite, 1", "SQLite, Postgres"),
        (True, "2,,DuckDB", "SQLite, DuckDB"),
    ],
)
def test_resolve_answer(multi: bool, given: str, answer: str) -> None:
    assert resolve_answer(prompt(multi), given) == answer


def test_describe_questions_numbers_questions_and_options() -> None:
    text = describe_questions([prompt(), prompt(multi=True)])
    assert text.splitlines() == [
        "1. Which database?",
        "     1) Postgres — the usual",
        "     2) SQLite",
        "     3) MySQL",
        "2. Which database? (several choices: separate them with commas)",
        "     1) Postgres — the usual",
        "     2) SQLite",
        "     3) MySQL",
    ]
