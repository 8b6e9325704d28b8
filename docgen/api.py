"""reference/api.md: the controller's REST API, from the FastAPI app's OpenAPI schema.

The app is made as `ApiServer` makes it (`create_app`), on a Controller that is never started:
nothing listens, nothing connects to a switch, and the schema is all the page needs.
"""

from __future__ import annotations

from typing import Any

from controller import api as controller_api
from controller.api import create_app
from controller.runtime import Controller, ControllerOptions
from docgen import markdown as md

SOURCE = "controller/api.py"
METHODS = ("get", "put", "post", "delete", "patch")
_CONSTRAINTS = (
    ("minimum", "≥"),
    ("exclusiveMinimum", ">"),
    ("maximum", "≤"),
    ("exclusiveMaximum", "<"),
    ("minLength", "length ≥"),
    ("maxLength", "length ≤"),
    ("minItems", "items ≥"),
    ("maxItems", "items ≤"),
    ("pattern", "matches"),
)


def openapi() -> dict[str, Any]:
    """The schema that /openapi.json serves."""
    controller = Controller(ControllerOptions(npms=(), db_url="sqlite://"))
    try:
        schema: dict[str, Any] = create_app(controller, token="unused").openapi()
    finally:
        controller.db.close()
    return schema


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def type_text(schema: dict[str, Any]) -> str:
    """A JSON schema's type in a few words: `integer`, `string or null`, `array of Flow`."""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " or ".join(type_text(s) for s in schema["anyOf"])
    if "enum" in schema:
        return "one of " + ", ".join(str(v) for v in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        return "array of " + type_text(schema.get("items", {}))
    if kind == "object":
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            return "object of " + type_text(extra)
        return "object"
    if kind is None:
        return "any"
    fmt = schema.get("format")
    return f"{kind} ({fmt})" if fmt else str(kind)


def constraints(schema: dict[str, Any]) -> str:
    return ", ".join(
        f"{word} {_number(schema[key])}" for key, word in _CONSTRAINTS if key in schema
    )


def default_text(schema: dict[str, Any]) -> str:
    return md.code(_json(schema["default"])) if "default" in schema else ""


def _json(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return _number(value)


def _content(content: dict[str, Any]) -> str:
    """What a request or response body carries: media type and schema."""
    parts = []
    for media, item in content.items():
        schema = item.get("schema", {})
        if "$ref" in schema:  # a schema of the Schemas section: a link to it
            name = type_text(schema)
            parts.append(f"{md.code(media)}: [{md.code(name)}](#{name.lower()})")
        else:
            parts.append(f"{md.code(media)}: {md.text(type_text(schema))}")
    return "; ".join(parts)


def operation(path: str, method: str, op: dict[str, Any]) -> list[str]:
    out = [f"### {md.code(f'{method.upper()} {path}', in_table=False)}", ""]
    if op.get("summary"):
        out += [md.text(op["summary"], in_table=False) + ".", ""]
    if op.get("description"):
        out += [*md.docstring(op["description"])]
    parameters = op.get("parameters", [])
    if parameters:
        rows = []
        for p in parameters:
            schema = p.get("schema", {})
            rows.append(
                [
                    md.code(p["name"]),
                    p["in"],
                    md.text(type_text(schema)),
                    "yes" if p.get("required") else "no",
                    default_text(schema),
                    md.text(constraints(schema)),
                    md.text(p.get("description", "")),
                ]
            )
        out += [
            "Parameters:",
            "",
            *md.table(
                ["Name", "In", "Type", "Required", "Default", "Constraints", "Description"],
                rows,
                optional=("Default", "Constraints", "Description"),
            ),
            "",
        ]
    body = op.get("requestBody")
    if body:
        required = "required" if body.get("required") else "optional"
        out += [f"Request body ({required}): {_content(body.get('content', {}))}", ""]
    responses = op.get("responses", {})
    if responses:
        rows = [
            [md.code(status), md.text(r.get("description", "")), _content(r.get("content", {}))]
            for status, r in responses.items()
        ]
        out += ["Responses:", "", *md.table(["Status", "Meaning", "Body"], rows), ""]
    return out


def schema_section(name: str, schema: dict[str, Any]) -> list[str]:
    out = [f"### {md.code(name, in_table=False)}", ""]
    if schema.get("description"):
        out += [md.text(schema["description"], in_table=False), ""]
    if schema.get("additionalProperties") is True:
        out += ["Fields not listed here are accepted and kept.", ""]
    required = set(schema.get("required", []))
    rows = []
    for field, prop in schema.get("properties", {}).items():
        rows.append(
            [
                md.code(field),
                md.text(type_text(prop)),
                "yes" if field in required else "no",
                default_text(prop),
                md.text(constraints(prop)),
                md.text(prop.get("description", "")),
            ]
        )
    if rows:
        out += md.table(
            ["Field", "Type", "Required", "Default", "Constraints", "Description"],
            rows,
            optional=("Default", "Constraints", "Description"),
        )
        out.append("")
    return out


def operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(path, method, operation) in the order the app declares them."""
    return [
        (path, method, item[method])
        for path, item in schema["paths"].items()
        for method in METHODS
        if method in item
    ]


def render() -> str:
    schema = openapi()
    info = schema["info"]
    ops = operations(schema)
    lines = [
        md.header(SOURCE),
        "",
        "# REST API",
        "",
        f"{md.text(info['title'], in_table=False)}, API version {md.code(info['version'])} "
        f"(OpenAPI {schema['openapi']}).",
        "",
        *md.docstring(controller_api.__doc__ or ""),
        "The client commands (`opengate status`, `sessions`, `policy apply`, ...) call these "
        "endpoints: see [the command line](cli.md).",
        "",
        "## Endpoints",
        "",
        *md.table(
            ["Method", "Path", "Summary"],
            [
                [method.upper(), md.code(path), md.text(op.get("summary", ""))]
                for path, method, op in ops
            ],
        ),
        "",
    ]
    for path, method, op in ops:
        lines += operation(path, method, op)
    components = schema.get("components", {})
    lines += ["## Schemas", "", "The request and error bodies named above.", ""]
    for name, item in sorted(components.get("schemas", {}).items()):
        lines += schema_section(name, item)
    schemes = components.get("securitySchemes", {})
    if schemes:
        lines += ["## Security schemes", ""]
        lines += md.table(
            ["Name", "Type", "Scheme"],
            [
                [md.code(name), md.text(s.get("type", "")), md.text(s.get("scheme", ""))]
                for name, s in sorted(schemes.items())
            ],
        )
    return md.page(lines)
