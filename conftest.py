"""The one conftest: it only wires the harness plugins in fixtures/."""
pytest_plugins = ["fixtures.plugins.harness", "fixtures.plugins.known_issues", "fixtures.plugins.reporting"]
