"""The one conftest: it only wires the harness plugins in fixtures/."""
pytest_plugins = ["fixtures.plugin", "fixtures.known_issues", "fixtures.reporting"]
