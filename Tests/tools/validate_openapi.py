#!/usr/bin/env python3
"""Validates ENS's OpenAPI description (docs/openapi.yaml by default).

Usage: validate_openapi.py [PATH]

Checks, in order: the file parses as YAML; it is OpenAPI 3.0.x; openapi-spec-validator
(PyPI) accepts it; and ENS's own rules: every device endpoint is there with the right
methods, every operation but /alive is behind the ApiToken scheme, and every response
example conforms to its schema. Exits 0 when all pass, 1 with a message on the first
failure, 2 when a needed package is missing.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_PATH = os.path.join(ROOT, "docs", "openapi.yaml")

# path -> the methods the server takes there (Routing/ENSRouter.swift).
ENDPOINTS = {
    "/alive": {"get", "head"},
    "/getpublickey": {"post"},
    "/registerdevicev2": {"post"},
    "/unregister": {"post"},
    "/updatedevice": {"post"},
    "/getsubscriptionstatus": {"post"},
    "/getsubscriptionstatusv2": {"post"},
    "/updatesynckey": {"post"},
    "/updateprivacy": {"post"},
    "/getnotification": {"post"},
    "/getnotificationhistory": {"post"},
    "/marknotificationsread": {"post"},
}
HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def short(text, limit: int = 300) -> str:
    """One line of at most `limit` characters (validator messages can embed the whole document)."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + " ..."


def fail(message: str, code: int = 1) -> None:
    print(f"validate_openapi: FAIL: {message}", file=sys.stderr)
    sys.exit(code)


def resolve(document: dict, node):
    """Follows local $refs (#/a/b) until a node that is not a $ref."""
    seen = set()
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        if not ref.startswith("#/") or ref in seen:
            fail(f"unsupported or circular $ref {ref!r}")
        seen.add(ref)
        node = document
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                fail(f"dangling $ref {ref!r}")
            node = node[part]
    return node


def check_ens_rules(document: dict) -> None:
    paths = document.get("paths") or {}
    if set(paths) != set(ENDPOINTS):
        missing = sorted(set(ENDPOINTS) - set(paths))
        extra = sorted(set(paths) - set(ENDPOINTS))
        fail(f"paths differ from the device API: missing {missing}, not served {extra}")
    for path, methods in ENDPOINTS.items():
        documented = {m for m in paths[path] if m in HTTP_METHODS}
        if documented != methods:
            fail(f"{path}: documents {sorted(documented)}, the server takes {sorted(methods)}")

    schemes = (document.get("components") or {}).get("securitySchemes") or {}
    token = schemes.get("ApiToken") or {}
    if (token.get("type"), token.get("in"), token.get("name")) != ("apiKey", "header", "ApiToken"):
        fail("components.securitySchemes.ApiToken must be an apiKey in header 'ApiToken'")
    if document.get("security") != [{"ApiToken": []}]:
        fail("the top-level security requirement must be [{ApiToken: []}]")

    validator_class = None
    try:
        from openapi_schema_validator import OAS30Validator
        validator_class = OAS30Validator
    except ImportError:  # older openapi-spec-validator releases bundle it differently
        pass

    for path, item in paths.items():
        for method in ENDPOINTS[path]:
            operation = item[method]
            where = f"{method.upper()} {path}"
            if path == "/alive":
                if operation.get("security") != []:
                    fail(f"{where}: must not require ApiToken (security: [])")
            elif "security" in operation:
                fail(f"{where}: must use the top-level ApiToken requirement")
            responses = operation.get("responses") or {}
            expected = {"200", "400", "429", "500", "503"}
            if path != "/alive":
                expected |= {"401", "413", "415"}
            if not expected <= set(responses):
                fail(f"{where}: responses {sorted(expected - set(responses))} are missing")
            if method == "post":
                body = resolve(document, operation.get("requestBody") or {})
                types = set((body.get("content") or {}))
                if types != {"application/json", "application/x-www-form-urlencoded"}:
                    fail(f"{where}: request body must offer exactly JSON and form, not {sorted(types)}")
            for status, response in responses.items():
                response = resolve(document, response)
                for media, content in (response.get("content") or {}).items():
                    if media != "application/json":
                        fail(f"{where} {status}: ENS only answers application/json, not {media}")
                    if validator_class is None:
                        continue
                    schema = content.get("schema")
                    examples = []
                    if "example" in content:
                        examples.append(content["example"])
                    for example in (content.get("examples") or {}).values():
                        examples.append(resolve(document, example).get("value"))
                    for example in examples:
                        wrapped = dict(document.get("components") or {})
                        root = {"components": wrapped, **schema}
                        errors = list(validator_class(root).iter_errors(example))
                        if errors:
                            fail(f"{where} {status}: example {example!r} does not match its schema: {short(errors[0].message)}")


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_PATH
    try:
        import yaml
        from openapi_spec_validator import validate
    except ImportError as error:
        fail(f"{error.name} is not installed: pip install openapi-spec-validator PyYAML "
             "(Tests/tools/schemathesis.sh installs both into a venv)", 2)
    try:
        from openapi_spec_validator import OpenAPIV30SpecValidator as SpecValidator
    except ImportError:
        SpecValidator = None

    try:
        with open(path, encoding="utf-8") as f:
            document = yaml.safe_load(f)
    except OSError as error:
        fail(f"cannot read {path}: {error.strerror}")
    except yaml.YAMLError as error:
        fail(f"{path} is not valid YAML: {error}")
    if not isinstance(document, dict):
        fail(f"{path} is not a YAML mapping")
    version = str(document.get("openapi", ""))
    if not version.startswith("3.0."):
        fail(f"{path}: 'openapi' is {version!r}; this project uses OpenAPI 3.0.x")

    try:
        if SpecValidator is not None:
            errors = list(SpecValidator(document).iter_errors())
            if errors:
                details = "\n".join(f"  - {short(e.message)} (at {'/'.join(str(p) for p in e.path) or 'root'})" for e in errors[:20])
                fail(f"{path} is not a valid OpenAPI 3.0 document ({len(errors)} problem(s)):\n{details}")
        else:
            validate(document)
    except SystemExit:
        raise
    except Exception as error:  # the validator's own exception types vary by release
        fail(f"{path} is not a valid OpenAPI 3.0 document: {type(error).__name__}: {short(error)}")

    check_ens_rules(document)
    print(f"validate_openapi: OK: {os.path.relpath(path)} is valid OpenAPI {version} "
          f"({len(document['paths'])} paths)")


if __name__ == "__main__":
    main()
