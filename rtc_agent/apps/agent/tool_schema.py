"""JSON-schema checks of tool arguments: a focused validator (the ``jsonschema`` package is not a dependency).

Supported: ``type`` (including lists of types), ``enum``, ``const``, ``properties``, ``required``,
``additionalProperties``, ``items``, ``minItems``/``maxItems``, ``uniqueItems``, ``minLength``/``maxLength``,
``pattern``, ``minimum``/``maximum``, ``exclusiveMinimum``/``exclusiveMaximum``, ``multipleOf``,
``anyOf``/``oneOf``/``allOf``/``not``; annotations (``description``, ``title``, ``default``, ``examples``,
``format``, ...) are ignored. :func:`check_schema` rejects a schema using anything else (``$ref``, ``if``,
``patternProperties``, ...) rather than half-checking it. :func:`validate` never coerces: ``"5"`` is not a number.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["SchemaError", "brief_json", "check_schema", "is_number", "validate"]


class SchemaError(ValueError):
    """A tool's parameter schema cannot be used (malformed, or uses unsupported keywords)."""


_ANNOTATIONS = frozenset({
    "description", "title", "default", "examples", "example", "format", "$schema", "$id", "$comment",
    "deprecated", "readOnly", "writeOnly", "nullable", "strict",
})
_SUPPORTED = frozenset({
    "type", "enum", "const", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
    "uniqueItems", "minLength", "maxLength", "pattern", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "multipleOf", "anyOf", "oneOf", "allOf", "not",
})
_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})


def check_schema(schema: Any, path: str = "parameters") -> None:
    """Raise :class:`SchemaError` unless ``schema`` is a schema this module can fully check."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, Mapping):
        raise SchemaError(f"{path}: a schema must be an object")
    for key, value in schema.items():
        if key in _ANNOTATIONS:
            continue
        if key not in _SUPPORTED:
            raise SchemaError(f"{path}: unsupported schema keyword {key!r}")
        if key == "type":
            types = value if isinstance(value, list) else [value]
            if not types or any(t not in _TYPES for t in types):
                raise SchemaError(f"{path}.type: unknown type {value!r}")
        elif key == "properties":
            if not isinstance(value, Mapping):
                raise SchemaError(f"{path}.properties must be an object")
            for name, sub in value.items():
                check_schema(sub, f"{path}.properties.{name}")
        elif key == "required":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise SchemaError(f"{path}.required must be a list of names")
        elif key in ("additionalProperties", "items", "not"):
            check_schema(value, f"{path}.{key}")
        elif key in ("anyOf", "oneOf", "allOf"):
            if not isinstance(value, list) or not value:
                raise SchemaError(f"{path}.{key} must be a non-empty list of schemas")
            for i, sub in enumerate(value):
                check_schema(sub, f"{path}.{key}[{i}]")
        elif key == "enum":
            if not isinstance(value, list) or not value:
                raise SchemaError(f"{path}.enum must be a non-empty list")
        elif key == "pattern":
            try:
                re.compile(value)
            except (re.error, TypeError) as exc:
                raise SchemaError(f"{path}.pattern is not a valid regular expression: {exc}") from None
        elif key in ("minItems", "maxItems", "minLength", "maxLength"):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise SchemaError(f"{path}.{key} must be a non-negative integer")
        elif key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf") and (
            not is_number(value) or (key == "multipleOf" and value <= 0)
        ):
            raise SchemaError(f"{path}.{key} must be a number" + (" > 0" if key == "multipleOf" else ""))


def is_number(value: Any) -> bool:
    """A finite JSON number (``True`` is not one)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _type_ok(value: Any, t: str) -> bool:
    if t == "string":
        return isinstance(value, str)
    if t == "integer":
        return is_number(value) and float(value).is_integer()
    if t == "number":
        return is_number(value)
    if t == "boolean":
        return isinstance(value, bool)
    if t == "object":
        return isinstance(value, dict)
    if t == "array":
        return isinstance(value, list)
    return value is None  # "null"


def _json_equal(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but True != 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def brief_json(value: Any) -> str:
    """``value`` as JSON, cut to 60 characters (for error messages)."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def validate(instance: Any, schema: Any, path: str = "arguments") -> list[str]:
    """Every way ``instance`` breaks ``schema``, as ``"<path>: <message>"`` strings (empty when valid)."""
    if schema is True or schema is None:
        return []
    if schema is False:
        return [f"{path}: no value is allowed here"]
    errors: list[str] = []
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_type_ok(instance, t) for t in types):
            return [f"{path}: expected {' or '.join(types)}, got {brief_json(instance)}"]
    if "enum" in schema and not any(_json_equal(instance, v) for v in schema["enum"]):
        errors.append(f"{path}: must be one of {brief_json(schema['enum'])}, got {brief_json(instance)}")
    if "const" in schema and not _json_equal(instance, schema["const"]):
        errors.append(f"{path}: must be {brief_json(schema['const'])}, got {brief_json(instance)}")
    if isinstance(instance, str):
        if "minLength" in schema and len(instance) < schema["minLength"]:
            errors.append(f"{path}: shorter than {schema['minLength']} characters")
        if "maxLength" in schema and len(instance) > schema["maxLength"]:
            errors.append(f"{path}: longer than {schema['maxLength']} characters")
        if "pattern" in schema and re.search(schema["pattern"], instance) is None:
            errors.append(f"{path}: does not match the pattern {schema['pattern']!r}")
    if is_number(instance):
        if "minimum" in schema and instance < schema["minimum"]:
            errors.append(f"{path}: must be >= {schema['minimum']}, got {instance}")
        if "maximum" in schema and instance > schema["maximum"]:
            errors.append(f"{path}: must be <= {schema['maximum']}, got {instance}")
        if "exclusiveMinimum" in schema and instance <= schema["exclusiveMinimum"]:
            errors.append(f"{path}: must be > {schema['exclusiveMinimum']}, got {instance}")
        if "exclusiveMaximum" in schema and instance >= schema["exclusiveMaximum"]:
            errors.append(f"{path}: must be < {schema['exclusiveMaximum']}, got {instance}")
        if "multipleOf" in schema:
            quotient = instance / schema["multipleOf"]
            if not math.isclose(quotient, round(quotient), rel_tol=0, abs_tol=1e-9):
                errors.append(f"{path}: must be a multiple of {schema['multipleOf']}, got {instance}")
    if isinstance(instance, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in instance:
                errors.append(f"{path}: missing required property {name!r}")
        extra = schema.get("additionalProperties", True)
        for name, value in instance.items():
            if name in props:
                errors.extend(validate(value, props[name], f"{path}.{name}"))
            elif extra is False:
                allowed = ", ".join(props) or "none"
                errors.append(f"{path}: unexpected property {name!r} (allowed: {allowed})")
            elif isinstance(extra, Mapping):
                errors.extend(validate(value, extra, f"{path}.{name}"))
    if isinstance(instance, list):
        if "minItems" in schema and len(instance) < schema["minItems"]:
            errors.append(f"{path}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(instance) > schema["maxItems"]:
            errors.append(f"{path}: more than {schema['maxItems']} items")
        if schema.get("uniqueItems"):
            seen: list[str] = []
            for item in instance:
                key = json.dumps(item, sort_keys=True, default=str)
                if key in seen:
                    errors.append(f"{path}: items must be unique")
                    break
                seen.append(key)
        if "items" in schema:
            for i, item in enumerate(instance):
                errors.extend(validate(item, schema["items"], f"{path}[{i}]"))
    for sub in schema.get("allOf", []):
        errors.extend(validate(instance, sub, path))
    if "anyOf" in schema and not any(not validate(instance, sub, path) for sub in schema["anyOf"]):
        errors.append(f"{path}: matches none of the allowed forms (anyOf)")
    if "oneOf" in schema:
        matches = sum(1 for sub in schema["oneOf"] if not validate(instance, sub, path))
        if matches != 1:
            errors.append(f"{path}: must match exactly one allowed form (oneOf), matches {matches}")
    if "not" in schema and not validate(instance, schema["not"], path):
        errors.append(f"{path}: matches a forbidden form (not)")
    return errors

