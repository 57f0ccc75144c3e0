#!/usr/bin/env python3
"""One route table: checks that every place naming ENS's endpoints names the same ones.

The router (Sources/ENSResponder/Routing/ENSRouter.swift, with each route's methods from
its `static let NAME = Route(methods: [...])`, or the methods of the helper that makes
it) is the truth. Checked against it:
  - nginx/ens-locations.conf: the regex location that forwards the device API, and the
    list the JSON 405 handler treats as known paths;
  - apache/ens-locations.conf: the ENS_API list every Apache backend forwards;
  - docs/openapi.yaml: its paths and their methods;
  - Tests/tools/validate_openapi.py: its ENDPOINTS table.
The mail callback prefixes (/ews/, /graph/) and /metrics are not device-API endpoints: nginx
has locations of their own for them and the OpenAPI document leaves them out.

Usage: scripts/check_routes.py [ROOT]. Exits 0 when all agree, 1 naming each difference.
"""
import ast
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOT_DEVICE_API = {"/metrics"}


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def router():
    """path -> set of lowercase methods, from the router and the routes it names."""
    table = read("Sources/ENSResponder/Routing/ENSRouter.swift")
    adds = re.findall(r'router\.add\("(/[^"]*)",\s*(\w+)\.(\w+)\)', table)
    # The mail backends' callback locations are added by MailBackendTable, each by its
    # backend's wiring (Sources/MailBackends/<Backend>/<Backend>Wiring.swift).
    wirings = "".join(read(os.path.join("Sources/MailBackends", backend, f"{backend}Wiring.swift"))
                      for backend in ("Exchange", "Graph"))
    prefixes = re.findall(r'router\.add\(prefix:', wirings) if "MailBackendTable.addRoutes" in table else []
    def method_set(methods):
        return {m.strip().strip('"').lower() for m in methods.split(",") if m.strip()}
    sources = []
    for directory, _, files in os.walk(os.path.join(ROOT, "Sources/ENSResponder")):
        for name in files:
            if name.endswith(".swift"):
                with open(os.path.join(directory, name), encoding="utf-8") as f:
                    sources.append(f.read())
    # Routes made by a helper (`static func sealedOperation(...) -> Route {
    # Route(methods: [...]) ...}`) take the helper's methods, from whichever file
    # defines it (`DeviceAPI.sealedOperation` is used beside DeviceAPI too).
    helpers = {}
    for text in sources:
        helpers.update({name: method_set(methods) for name, methods in re.findall(
            r'static func (\w+)\([^{]*-> Route \{\s*Route\(methods: \[([^\]]*)\]', text)})
    routes = {}
    for text in sources:
        owner = re.search(r'^(?:public )?(?:enum|struct|final class|class) (\w+)', text, re.M)
        if not owner:
            continue
        for route, methods in re.findall(r'static let (\w+) = Route\(methods: \[([^\]]*)\]', text):
            routes[(owner.group(1), route)] = method_set(methods)
        for route, helper in re.findall(r'static let (\w+) = (?:\w+\.)?(\w+)\(', text):
            if helper in helpers:
                routes[(owner.group(1), route)] = helpers[helper]
    paths = {}
    problems = []
    for path, owner, route in adds:
        methods = routes.get((owner, route))
        if methods is None:
            problems.append(f"router: {owner}.{route} (for {path}) has no `static let {route} = Route(methods: ...)`")
            continue
        if "get" in methods:
            methods = methods | {"head"}  # the dispatcher answers HEAD wherever GET is taken
        paths[path] = methods
    if not prefixes:
        problems.append("router: the mail backends' callback prefix routes are missing (Router.ens() calls MailBackendTable.addRoutes; each wiring adds its prefix)")
    return paths, problems


def nginx():
    text = read("nginx/ens-locations.conf")
    forwarded = re.search(r'location ~ \^/\(([^)]*)\)\$ \{', text)
    known = re.search(r'if \(\$uri !~ \^/\(([^)]*)\)\$\)', text)
    return ({"/" + p for p in forwarded.group(1).split("|")} if forwarded else None,
            {"/" + p for p in known.group(1).split("|") if not p.startswith(("ews/", "graph/"))} if known else None)


def apache():
    match = re.search(r'^Define ENS_API "([^"]*)"', read("apache/ens-locations.conf"), re.M)
    return {"/" + p for p in match.group(1).split("|")} if match else None


def openapi():
    """path -> set of methods, from the `paths:` section (2-space path keys, 4-space methods)."""
    paths, current, inside = {}, None, False
    for line in read("docs/openapi.yaml").splitlines():
        if line.startswith("paths:"):
            inside = True
            continue
        if inside and line and not line.startswith(" "):
            break
        if not inside:
            continue
        match = re.match(r'^  (/\S*):\s*$', line)
        if match:
            current = match.group(1)
            paths[current] = set()
            continue
        match = re.match(r'^    (get|put|post|delete|options|head|patch|trace):\s*$', line)
        if match and current:
            paths[current].add(match.group(1))
    return paths


def validator_table():
    text = read("Tests/tools/validate_openapi.py")
    match = re.search(r'^ENDPOINTS = (\{.*?^\})', text, re.M | re.S)
    return ast.literal_eval(match.group(1)) if match else None


def main():
    routes, problems = router()
    device = {p: m for p, m in routes.items() if p not in NOT_DEVICE_API}
    forwarded, known = nginx()
    if forwarded is None:
        problems.append("nginx/ens-locations.conf: no `location ~ ^/(...)$` for the device API")
    elif forwarded != set(device):
        problems.append(f"nginx forwards {sorted(forwarded)}, the router has {sorted(device)}")
    forwarded_by_apache = apache()
    if forwarded_by_apache is None:
        problems.append("apache/ens-locations.conf: no `Define ENS_API \"...\"` for the device API")
    elif forwarded_by_apache != set(device):
        problems.append(f"Apache forwards {sorted(forwarded_by_apache)}, the router has {sorted(device)}")
    post_only = {p for p, m in device.items() if "post" in m}
    if known is None:
        problems.append("nginx/ens-locations.conf: no known-path list in @ens_method_not_allowed")
    elif known != post_only:
        problems.append(f"nginx's 405 handler knows {sorted(known)}, the router's POST endpoints are {sorted(post_only)}")
    documented = openapi()
    for path, methods in sorted(device.items()):
        if path not in documented:
            problems.append(f"docs/openapi.yaml does not document {path}")
        elif not documented[path] <= methods or documented[path] - {"head"} != methods - {"head"}:
            # (HEAD may be left out where GET is documented.)
            problems.append(f"docs/openapi.yaml gives {path} {sorted(documented[path])}, the router {sorted(methods)}")
    for path in sorted(set(documented) - set(device)):
        problems.append(f"docs/openapi.yaml documents {path}, which the router does not serve")
    table = validator_table()
    if table is None:
        problems.append("Tests/tools/validate_openapi.py: no ENDPOINTS table")
    elif {p: set(m) for p, m in table.items()} != device:
        problems.append(f"Tests/tools/validate_openapi.py ENDPOINTS {table} differs from the router {device}")
    for problem in problems:
        print(f"check_routes: {problem}", file=sys.stderr)
    if not problems:
        print(f"check_routes: OK ({len(device)} device endpoints agree in the router, nginx, Apache, OpenAPI and the validator)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
