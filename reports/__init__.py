"""Report tools of the TMA conformance suite.

``python -m reports matrix RUN_DIR`` · ``diff OLD NEW`` · ``merge RUN_DIR...``
(reports/README.md). Modules: ``model`` (states, reading runs), ``fingerprint``
(environment.json), ``axes`` (parameter axes from case ids), ``matrix``,
``diff``, ``merge``, ``render`` (Markdown/HTML).
"""
