"""JSON schemas as each server family takes them: OpenAI's strict structured outputs and strict tools
(made strict by the openai SDK's own helper), and plain schemas with every ``$ref`` resolvable.
"""
from __future__ import annotations

import copy
import json
from typing import Any

from pydantic import BaseModel

# Keywords OpenAI's strict mode refuses ("Invalid schema ... 'minLength' is not permitted"): pydantic still
# checks them after the answer arrives.
STRICT_UNSUPPORTED = ("default", "minLength", "maxLength", "patternProperties", "propertyNames", "minProperties",
                      "maxProperties", "uniqueItems", "contains", "unevaluatedProperties", "unevaluatedItems",
                      "discriminator")
# Keywords strict mode refuses that cannot be dropped without changing what the schema allows: such a schema is
# sent non-strict. ``oneOf`` becomes ``anyOf`` (the same answers for the tagged unions pydantic writes).
STRICT_REFUSED = ("allOf", "not", "if", "then", "else", "dependentRequired", "dependentSchemas")
# OpenAI's documented size limits for a strict schema.
STRICT_MAX_DEPTH, STRICT_MAX_PROPERTIES, STRICT_MAX_ENUM = 10, 5000, 1000
_CHILD_MAPS = ("properties", "$defs", "definitions")
_CHILD_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")


def _children(node: dict[str, Any]) -> list[dict[str, Any]]:
    kids = [v for key in _CHILD_MAPS for v in (node.get(key) or {}).values() if isinstance(v, dict)]
    kids += [v for key in _CHILD_LISTS for v in node.get(key) or [] if isinstance(v, dict)]
    kids += [node[key] for key in ("items", "additionalProperties", "not") if isinstance(node.get(key), dict)]
    return kids


def hoist_defs(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy with every nested ``$defs`` moved to the root, where ``#/$defs/...`` references resolve
    (a model's schema embedded as one property keeps its ``$defs`` beside it, out of reach)."""
    root = copy.deepcopy(schema)
    found: dict[str, Any] = {}

    def walk(node: dict[str, Any], top: bool) -> None:
        if not top and isinstance(node.get("$defs"), dict):
            found.update(node.pop("$defs"))
        for child in _children(node):
            walk(child, False)

    walk(root, True)
    for name, sub in list(found.items()):
        walk(sub, False)
    if found:
        root["$defs"] = {**found, **root.get("$defs", {})}
    return root


def _strip(node: dict[str, Any]) -> None:
    for key in STRICT_UNSUPPORTED:
        node.pop(key, None)
    for child in _children(node):
        _strip(child)


def _any_of(node: dict[str, Any]) -> None:
    """``oneOf`` as ``anyOf``, everywhere: strict mode refuses the one and takes the other."""
    if isinstance(node.get("oneOf"), list):
        node["anyOf"] = [*(node.get("anyOf") or []), *node.pop("oneOf")]
    for child in _children(node):
        _any_of(child)


def _nesting(node: dict[str, Any], defs: dict[str, Any], seen: tuple[str, ...] = ()) -> int:
    """Levels of properties and items in ``node``, references followed (each once on a path: recursion)."""
    ref = node.get("$ref", "")
    if ref.startswith("#/$defs/") and ref not in seen:
        return _nesting(defs.get(ref[len("#/$defs/"):], {}), defs, (*seen, ref))
    inner = [v for v in (node.get("properties") or {}).values() if isinstance(v, dict)]
    inner += [node["items"]] if isinstance(node.get("items"), dict) else []
    skip = [*inner, *(node.get("$defs") or {}).values()]
    other = [c for c in _children(node) if all(c is not k for k in skip)]
    return max([1 + _nesting(c, defs, seen) for c in inner] + [_nesting(c, defs, seen) for c in other] + [0])


def _too_much(schema: dict[str, Any]) -> bool:
    """True when strict mode would refuse ``schema`` as a whole: a keyword it cannot take, a root that is not
    one object, objects in one ``anyOf`` that begin with the same property (same name and schema: a tag
    with one value per variant is fine), more nesting, properties or enum values than it allows."""
    defs = schema.get("$defs") or {}

    def first(node: dict[str, Any]) -> str | None:
        ref = node.get("$ref", "")
        target = defs.get(ref.removeprefix("#/$defs/"), {}) if ref else node
        key = next(iter(target.get("properties") or {}), None)
        return None if key is None else json.dumps([key, target["properties"][key]], sort_keys=True)

    nodes, stack = [], [schema]
    while stack:
        nodes.append(stack.pop())
        stack.extend(_children(nodes[-1]))
    for node in nodes:
        firsts = [f for f in map(first, [v for v in node.get("anyOf") or [] if isinstance(v, dict)]) if f]
        if any(k in node for k in STRICT_REFUSED) or len(firsts) > len(set(firsts)):
            return True
    return (schema.get("type") != "object" or "anyOf" in schema or _nesting(schema, defs) > STRICT_MAX_DEPTH
            or sum(len(n.get("properties") or {}) for n in nodes) > STRICT_MAX_PROPERTIES
            or sum(len(n.get("enum") or []) for n in nodes) > STRICT_MAX_ENUM)


def _open_object(node: dict[str, Any]) -> bool:
    """True when some object in ``node`` accepts keys it does not name (strict mode cannot say that)."""
    if node.get("type") == "object" and node.get("additionalProperties") is not False:
        return True
    return any(_open_object(child) for child in _children(node))


def _nullable(prop: dict[str, Any]) -> dict[str, Any]:
    if prop.get("type") == "null" or any(v.get("type") == "null" for v in prop.get("anyOf", [])):
        return prop
    if isinstance(prop.get("type"), str) and "enum" not in prop and "$ref" not in prop:
        return {**prop, "type": [prop["type"], "null"]}
    return {"anyOf": [prop, {"type": "null"}]}


def _optional_nullable(node: dict[str, Any]) -> None:
    """Properties a hand-written schema leaves optional become nullable before strict mode requires them."""
    props = node.get("properties")
    if isinstance(props, dict):
        required = set(node.get("required", []))
        node["properties"] = {k: v if k in required else _nullable(v) for k, v in props.items()}
    for child in _children(node):
        _optional_nullable(child)


def strict_schema(source: type[BaseModel] | dict[str, Any], *, nullable_optional: bool = False
                  ) -> dict[str, Any] | None:
    """``source`` (a pydantic model or its JSON schema, or a tool's) as a valid strict schema, by the openai
    SDK's helper: every property required, ``additionalProperties: false`` everywhere, ``$defs`` at the root,
    no unsupported keyword, ``oneOf`` as ``anyOf``; with ``nullable_optional`` (tools) optional properties become
    nullable first (a pydantic model's already are). None when it cannot be strict (an object with open keys, a
    keyword strict mode refuses, a root that is not an object, sizes past OpenAI's limits): sent non-strict."""
    from openai.lib._pydantic import _ensure_strict_json_schema

    schema = hoist_defs(source if isinstance(source, dict) else source.model_json_schema())
    _any_of(schema)
    if nullable_optional:
        _optional_nullable(schema)
    schema = _ensure_strict_json_schema(schema, path=(), root=schema)
    _strip(schema)
    return None if _open_object(schema) or _too_much(schema) else schema
