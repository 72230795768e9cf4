"""One declarative schema per file format the tool reads, and the one way a document is checked against it.

Each schema is a JSON Schema (draft 2020-12) in ``dgprecompile/data/schemas/<name>.json``: the format is data, not
a chain of ``isinstance`` checks. :func:`check` turns the first violation into one :class:`InputError` that names
the field (``plans[0].tp``) and what was wrong, with the hint the caller gives; the offending value is shown cut
to a few characters, so a huge or hostile document cannot make the message (or the memory it takes) grow.

jsonschema is imported only here, and only when a document is checked.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from importlib import resources
from typing import Any

from dgprecompile.errors import InputError

_SHOWN = 60  # characters of an offending value quoted in a message


@cache
def schema(name: str) -> dict[str, Any]:
    """The schema of one file format, by name (the file's stem under data/schemas/)."""
    text = resources.files("dgprecompile.data").joinpath("schemas", f"{name}.json").read_text()
    return json.loads(text)


def field_path(parts) -> str:
    """``['plans', 0, 'tp']`` -> ``plans[0].tp``; the empty path is the document itself."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(the document)"


def shown(value: Any) -> str:
    """A value as a message quotes it: cut to a few characters. Only the pieces up to the cut are made, so the
    work is bounded however large (or alias-multiplied) the value is."""
    if isinstance(value, str):
        text = repr(value[:_SHOWN + 1])
    else:
        text = ""
        for piece in _pieces(value):
            text += piece
            if len(text) > _SHOWN:
                break
    return text if len(text) <= _SHOWN else text[:_SHOWN - 3] + "..."


def _pieces(value: Any) -> Iterator[str]:
    """``json.dumps(value)`` in pieces, made as they are asked for (a long string: its start only, which is all
    a cut message shows)."""
    if isinstance(value, dict):
        yield "{"
        for i, (key, item) in enumerate(value.items()):
            yield (", " if i else "") + next(_pieces(key if isinstance(key, str) else str(key))) + ": "
            yield from _pieces(item)
        yield "}"
    elif isinstance(value, (list, tuple)):
        yield "["
        for i, item in enumerate(value):
            if i:
                yield ", "
            yield from _pieces(item)
        yield "]"
    elif isinstance(value, str):
        yield json.dumps(value[:_SHOWN + 1])  # one character more than shown: the cut still shows
    else:
        try:
            yield json.dumps(value, default=str)
        except ValueError:  # an int past Python's 4,300-digit conversion limit
            yield f"<{type(value).__name__} too large to show>"


def _shown_expected(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else repr(value)


def _describe(error) -> str:
    """One short sentence for a jsonschema ValidationError, without the whole instance in it."""
    kind, expected = error.validator, error.validator_value
    value = shown(error.instance)
    if kind == "required":
        missing = [k for k in expected if isinstance(error.instance, dict) and k not in error.instance]
        return f"missing {', '.join(map(str, missing)) or 'a required field'}"
    if kind == "type":
        wanted = expected if isinstance(expected, str) else " or ".join(expected)
        return f"{value} is not {'an' if wanted[0] in 'aeiou' else 'a'} {wanted}"
    if kind == "const":
        return f"{value} is not {_shown_expected(expected)}"
    if kind == "enum":
        return f"{value} is not one of {', '.join(map(str, expected))}"
    if kind in ("minimum", "exclusiveMinimum"):
        return f"{value} is below the smallest allowed value {expected}"
    if kind in ("maximum", "exclusiveMaximum"):
        return f"{value} is above the largest allowed value {expected}"
    if kind == "additionalProperties":
        extra = sorted(k for k in error.instance if k not in error.schema.get("properties", {}))
        return f"unknown field {', '.join(map(str, extra))}"
    if kind == "pattern":
        return f"{value} does not have the expected form"
    if kind in ("minLength", "minItems", "minProperties"):
        return f"{value} is empty or too short"
    if kind in ("maxLength", "maxItems", "maxProperties"):
        return f"{value} is too long"
    alternatives = [sorted(branch["required"]) for branch in expected if set(branch) == {"required"}] \
        if kind == "oneOf" and isinstance(error.instance, dict) else []
    if alternatives and len(alternatives) == len(expected):  # one of several fields, exactly one present
        names = " or ".join(", ".join(a) for a in alternatives)
        return f"needs exactly one of {names}"
    return f"{value} is not valid ({kind})"


@cache
def _validator_class():
    """Draft 2020-12, except that an integer is an int (JSON Schema also counts 8.0 as one; the code after a
    check must be able to use the value as the int it is)."""
    from jsonschema import Draft202012Validator, validators

    checker = Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool))
    return validators.extend(Draft202012Validator, type_checker=checker)


def validator(name: str):
    return _validator_class()(schema(name))


def problems(doc: Any, name: str) -> list[str]:
    """Every violation of the schema ``name`` in ``doc``, as 'field: what' lines (for reports that list them all)."""
    validator_ = validator(name)
    errors = sorted(validator_.iter_errors(doc), key=lambda e: (list(map(str, e.absolute_path)), e.validator))
    return [f"{field_path(e.absolute_path)}: {_describe(e)}" for e in errors]


def check(doc: Any, name: str, where: str, hint: str) -> Any:
    """Return ``doc`` when it is valid under the schema ``name``; else raise one InputError naming the field."""
    from jsonschema.exceptions import best_match

    error = best_match(validator(name).iter_errors(doc))
    if error is None:
        return doc
    raise InputError(f"{where}: {field_path(error.absolute_path)}: {_describe(error)}", hint=hint)
