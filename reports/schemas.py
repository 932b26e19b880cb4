"""The JSON Schemas of the reports: ``results.json`` and ``environment.json`` (a run's
folder) and ``fleet.json`` (``python -m reports merge``), in ``reports/schemas/``, one
per version of the file's ``schema`` field (its ``$id``). Any JSON Schema validator
(draft 2020-12) reads them; :func:`errors` is the self-tests' (it needs the
``jsonschema`` package, imported on first use)."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

FOLDER = Path(__file__).resolve().parent / "schemas"
FILES = {"results.json": "results.schema.json", "environment.json": "environment.schema.json",
         "fleet.json": "fleet.schema.json"}


@lru_cache(maxsize=None)
def schema(name: str) -> dict:
    """The schema of report file ``name`` (``results.json``, ``environment.json``,
    ``fleet.json``)."""
    return json.loads((FOLDER / FILES[name]).read_text())


def errors(name: str, data: object, limit: int = 10) -> list[str]:
    """What in ``data`` breaks the schema of report file ``name``: one line per error,
    "where: what" (at most ``limit``); none when it is valid."""
    import jsonschema  # lazy: only the self-tests validate (a dependency of the suite's install)
    validator = jsonschema.Draft202012Validator(schema(name),
                                                format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    out = []
    for e in sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path))):
        where = "/".join(map(str, e.absolute_path)) or "(top)"
        out.append(f"{name} {where}: {e.message[:300]}")
        if len(out) >= limit:
            break
    return out
