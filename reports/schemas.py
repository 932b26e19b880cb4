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
# The previous versions the report tools still read (a fleet mixes nodes of several suite
# versions), by their ``schema`` value.
PREVIOUS = {"tmac-results/1": "results-1.schema.json"}


@lru_cache(maxsize=None)
def schema(name: str, version: str | None = None) -> dict:
    """The schema of report file ``name`` (``results.json``, ``environment.json``,
    ``fleet.json``): the version the code writes, or ``version`` where that is one of
    ``PREVIOUS``."""
    return json.loads((FOLDER / (PREVIOUS.get(version or "") or FILES[name])).read_text())


def errors(name: str, data: object, limit: int = 10) -> list[str]:
    """What in ``data`` breaks the schema of report file ``name`` (of the version its
    ``schema`` field names, where that is a previous one still read): one line per
    error, "where: what" (at most ``limit``); none when it is valid."""
    import jsonschema  # lazy: only the self-tests validate (a dependency of the suite's install)
    version = data.get("schema") if isinstance(data, dict) else None
    if not (isinstance(version, str) and version in PREVIOUS
            and PREVIOUS[version].startswith(FILES[name].split(".")[0] + "-")):
        version = None
    validator = jsonschema.Draft202012Validator(schema(name, version),
                                                format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    out = []
    for e in sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path))):
        where = "/".join(map(str, e.absolute_path)) or "(top)"
        out.append(f"{name} {where}: {e.message[:300]}")
        if len(out) >= limit:
            break
    return out
