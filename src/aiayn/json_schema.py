"""JSON Schema, written once and used both ways: the service publishes it (`/openapi.json`)
and aiayn checks the JSON it reads back against the same dicts (`fits`).

`fits` knows the keywords aiayn's checked schemas use: `type`, `enum`, `minimum`, `maximum`,
`properties`, `required` and `items` (with JSON Schema's meanings: a boolean is not a number,
1.0 is an integer); `description` is for readers. Any other keyword is a ValueError rather
than a check silently skipped.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

STRING: Schema = {"type": "string"}
NUMBER: Schema = {"type": "number"}
COUNT: Schema = {"type": "integer", "minimum": 1}

CHECKED = {"type", "enum", "minimum", "maximum", "properties", "required", "items", "description"}


def obj(properties: dict[str, Schema], required: tuple[str, ...] = (), **extra: Any) -> Schema:
    return {"type": "object", "properties": properties, "required": list(required), **extra}


def array(items: Schema, **extra: Any) -> Schema:
    return {"type": "array", "items": items, **extra}


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":
        return _is_type(value, "number") and float(value).is_integer()
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    kinds = {"string": str, "boolean": bool, "object": dict, "array": list, "null": type(None)}
    return isinstance(value, kinds[name])


def fits(value: Any, schema: Schema) -> bool:
    """Whether `value` (parsed JSON) is valid against `schema` (see the module's docstring)."""
    unknown = set(schema) - CHECKED
    if unknown:
        raise ValueError(f"fits does not check {sorted(unknown)}")
    types = schema.get("type")
    if types is not None and not any(
        _is_type(value, name) for name in ([types] if isinstance(types, str) else types)
    ):
        return False
    if "enum" in schema and value not in schema["enum"]:
        return False
    if _is_type(value, "number") and (
        ("minimum" in schema and not value >= schema["minimum"])
        or ("maximum" in schema and not value <= schema["maximum"])
    ):
        return False
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        if any(key not in value for key in schema.get("required", ())):
            return False
        return all(fits(value[key], sub) for key, sub in properties.items() if key in value)
    if isinstance(value, list) and "items" in schema:
        return all(fits(item, schema["items"]) for item in value)
    return True
