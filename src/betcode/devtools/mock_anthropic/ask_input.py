"""AskUserQuestion input built from the tool's JSON schema as the CLI sends it.

The CLI validates tool input against that schema, so the mock reads the limits (item counts,
string lengths, required fields) from it instead of hard-coding them: a CLI upgrade that
changes the schema keeps working, and a field the mock does not know gets the simplest
valid value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

TOOL_NAME = "AskUserQuestion"


class SchemaError(ValueError):
    """The request offers no AskUserQuestion tool, or its schema has an unexpected shape."""


def _properties(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        raise SchemaError(f"schema without properties: {dict(schema)!r:.200}")
    return properties


def _child(schema: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    child = _properties(schema).get(name)
    if not isinstance(child, Mapping):
        raise SchemaError(f"schema has no property {name!r}")
    return child


def _items(array_schema: Mapping[str, Any]) -> Mapping[str, Any]:
    items = array_schema.get("items")
    if not isinstance(items, Mapping):
        raise SchemaError("array schema without items")
    return items


def _clamp(count: int, array_schema: Mapping[str, Any]) -> int:
    low = int(array_schema.get("minItems", 0))
    high = int(array_schema.get("maxItems", max(count, low)))
    return max(low, min(count, high))


def _fit(text: str, string_schema: Mapping[str, Any]) -> str:
    limit = string_schema.get("maxLength")
    return text[: int(limit)] if isinstance(limit, int) else text


def simplest(schema: Mapping[str, Any]) -> Any:
    """The simplest value valid for `schema` (used for fields the mock has no value for)."""
    kind = schema.get("type")
    if "default" in schema:
        return schema["default"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if kind == "string":
        return "x" * int(schema.get("minLength", 1))
    if kind == "boolean":
        return False
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "array":
        return [simplest(_items(schema)) for _ in range(int(schema.get("minItems", 0)))]
    if kind == "object":
        return fill(schema, {})
    raise SchemaError(f"no simple value for schema {dict(schema)!r:.200}")


def fill(schema: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """An object for `schema`: `values` where the schema has that property, else defaults."""
    properties = _properties(schema)
    required = schema.get("required", [])
    names = [n for n in properties if n in values or n in required]
    result: dict[str, Any] = {}
    for name in names:
        if name in values:
            value = values[name]
            result[name] = _fit(value, properties[name]) if isinstance(value, str) else value
        else:
            result[name] = simplest(properties[name])
    return result


def find_schema(tools: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    for tool in tools:
        if tool.get("name") == TOOL_NAME and isinstance(tool.get("input_schema"), Mapping):
            schema: Mapping[str, Any] = tool["input_schema"]
            return schema
    raise SchemaError(f"the request offers no {TOOL_NAME} tool")


def question_text(number: int) -> str:
    return f"Mock question {number}: which option do you pick?"


def ask_input(
    tools: Sequence[Mapping[str, Any]], questions: int, multi_select: bool = False
) -> dict[str, Any]:
    """AskUserQuestion input with `questions` questions (clamped to the schema's limits).

    Question n asks `question_text(n)` and offers options labelled "Option n<letter>".
    """
    schema = find_schema(tools)
    questions_schema = _child(schema, "questions")
    question_schema = _items(questions_schema)
    options_schema = _child(question_schema, "options")
    option_schema = _items(options_schema)
    made = []
    for number in range(1, _clamp(questions, questions_schema) + 1):
        options = [
            fill(option_schema, {"label": f"Option {number}{x}", "description": f"Pick {x}"})
            for x in "ABCD"[: _clamp(2, options_schema)]
        ]
        made.append(
            fill(
                question_schema,
                {
                    "question": question_text(number),
                    "header": f"Q{number}",
                    "options": options,
                    "multiSelect": multi_select,
                },
            )
        )
    return {"questions": made}
