"""The configuration reference, ``docs/configuration.md``, generated from ``config/schema.yaml``.

The schema is the one place where keys, types, defaults and their descriptions live; this module
renders it as Markdown, so the reference cannot drift from what ``snakemake.utils.validate``
enforces (a test compares the committed file with a fresh rendering)::

    python -m llm_utility.config_reference docs/configuration.md   # or: make config-docs
    python -m llm_utility.config_reference                         # print it
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .config import SCHEMA

COMMAND = "python -m llm_utility.config_reference docs/configuration.md"
# Named definitions of the schema and the words the reference uses for them.
_REFS = {"#/definitions/slug": "slug", "#/definitions/file": "[file spec](#file-specs)"}


def load_schema(path: str | Path = SCHEMA) -> dict:
    import yaml

    return yaml.safe_load(Path(path).read_text(encoding="utf-8"))


def _literal(value: Any) -> str:
    """A default or enum value as YAML writes it (flow style, quoted only where YAML needs it), in
    backticks."""
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, width=1_000_000).strip()
    return f"`{text.removesuffix('...').strip()}`"


def _bounds(node: Mapping) -> str:
    marks = (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("exclusiveMaximum", "<"))
    parts = [f"{sign} {node[key]}" for key, sign in marks if key in node]
    if "minItems" in node:
        parts.append(f"at least {node['minItems']} item{'s' if node['minItems'] != 1 else ''}")
    return f" ({', '.join(parts)})" if parts else ""


def type_of(node: Mapping) -> str:
    """The type of one schema node in words: ``integer (≥ 1)``, ``one of `a`, `b```, ``slug``..."""
    if "$ref" in node:
        return _REFS.get(node["$ref"], node["$ref"])
    if "enum" in node:
        return "one of " + ", ".join(_literal(v) for v in node["enum"])
    if "oneOf" in node and all("type" in alt or "$ref" in alt for alt in node["oneOf"]):
        return " or ".join(type_of(alt) for alt in node["oneOf"])
    kind = node.get("type", "any")
    kinds = kind if isinstance(kind, list) else [kind]
    words = []
    for k in kinds:
        if k == "array" and "enum" in node.get("items", {}):
            words.append("list, each one of " + ", ".join(_literal(v) for v in node["items"]["enum"]))
        elif k == "array" and "items" in node:
            words.append(f"list of {type_of(node['items'])}")
        elif k == "object" and isinstance(node.get("additionalProperties"), Mapping) and "properties" not in node:
            words.append(f"mapping of {type_of(node['additionalProperties'])}")
        else:
            words.append(k)
    return " or ".join(words) + _bounds(node)


def _conditions(node: Mapping) -> list[str]:
    """``if source is X then require Y`` rules of a collection's entries, in words."""
    lines = []
    for rule in node.get("allOf", []):
        ((key, test),) = rule["if"]["properties"].items()
        values = [test["const"]] if "const" in test else test["enum"]
        required = ", ".join(f"`{name}`" for name in rule["then"]["required"])
        lines.append(f"{required} required when `{key}` is {' or '.join(_literal(v) for v in values)}.")
    return lines


def _is_section(node: Mapping) -> bool:
    return node.get("type") == "object" and "properties" in node


def _is_collection(node: Mapping) -> bool:
    return (
        node.get("type") == "object"
        and isinstance(node.get("additionalProperties"), Mapping)
        and "properties" in node["additionalProperties"]
    )


def rows(properties: Mapping, prefix: str, required: set[str] | None = None) -> Iterator[tuple[str, str, str, str]]:
    """(key, type, default, description) of every key under ``properties``, in the schema's order;
    a nested mapping (``resources.llm``, ``llms.<name>.weights``) gives a row of its own when it
    has a description, then one row per key inside it (``resources.llm.mem_mb``)."""
    required = required or set()
    for name, node in properties.items():
        key = f"{prefix}{name}"
        if "default" in node:
            default = _literal(node["default"])
        else:
            default = "required" if name in required else "-"
        if _is_section(node):
            if "description" in node:
                alternatives = [" + ".join(f"`{k}`" for k in alt["required"]) for alt in node.get("oneOf", [])]
                kind = "mapping" + (f" with exactly one of {', '.join(alternatives)}" if alternatives else "")
                yield key, kind, default, node["description"]
            yield from rows(node["properties"], key + ".", set(node.get("required", [])))
        else:
            yield key, type_of(node), default, node.get("description", "")


def _prose(text: str) -> str:
    """Schema prose as Markdown: one line, and `<` `>` outside code spans shown, not read as HTML."""
    parts = " ".join(text.split()).split("`")
    for i in range(0, len(parts), 2):  # even parts are outside backticks
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def _table(lines: list[str], items: Iterator[tuple[str, str, str, str]]) -> None:
    lines += ["| key | type | default | description |", "|---|---|---|---|"]
    for key, kind, default, description in items:
        cells = (f"`{key}`", kind, default, _prose(description))
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    lines.append("")


def reference(schema: Mapping) -> str:
    """The Markdown reference of every key of ``schema``: one table of the top-level keys, then one
    per section (``judgments``, ``report``, ...) and per named collection (``llms.<name>``, ...)."""
    props = schema["properties"]
    required = set(schema.get("required", []))
    lines = [
        f"<!-- Generated from config/schema.yaml by `{COMMAND}` (make config-docs): edit the schema's"
        " descriptions, not this file (a test checks it is current). -->",
        "",
        "# Configuration reference",
        "",
    ]
    for paragraph in schema["description"].split("\n"):
        if paragraph.strip():
            lines += [_prose(paragraph), ""]
    lines += [
        "Default `required`: the key must be set; `-`: optional, no default. `<name>` stands for the name of"
        " an entry of `corpora`, `datasets`, `retrievers` or `llms`, a slug used in file names:"
        f" `{schema['definitions']['slug']['pattern'].strip('^$')}`.",
        "",
        "## Top-level keys",
        "",
    ]
    plain = {k: v for k, v in props.items() if not (_is_section(v) or _is_collection(v))}
    _table(lines, rows(plain, ""))
    for name, node in props.items():
        if name in plain:
            continue
        if _is_collection(node):
            entry = node["additionalProperties"]
            lines += [f"## {name}", ""]
            if "description" in node:
                lines += [_prose(node["description"]), ""]
            if name in required:
                lines += ["Required, with at least one entry.", ""]
            _table(lines, rows(entry["properties"], f"{name}.<name>.", set(entry.get("required", []))))
            conditions = _conditions(entry)
            if conditions:
                lines += [*(f"- {c}" for c in conditions), ""]
        else:
            lines += [f"## {name}", ""]
            if "description" in node:
                lines += [_prose(node["description"]), ""]
            _table(lines, rows(node["properties"], f"{name}."))
    spec = schema["definitions"]["file"]
    lines += ["## File specs", "", _prose(spec["description"]), ""]
    (mapping,) = [alt for alt in spec["oneOf"] if alt.get("type") == "object"]
    _table(lines, rows(mapping["properties"], "<file>."))
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1 or (args and args[0].startswith("-")):
        if args and args[0] in ("-h", "--help"):
            print(f"usage: {COMMAND.replace(' docs/configuration.md', '')} [OUTPUT.md]: the configuration reference")
            return
        raise SystemExit(f"usage: {COMMAND.replace(' docs/configuration.md', '')} [OUTPUT.md]")
    text = reference(load_schema())
    if args:
        from .io import write_text

        write_text(text, args[0])
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
