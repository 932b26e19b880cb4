"""The one conftest: it only wires the harness plugins in fixtures/."""
import pytest

# The plugin modules import each other at their top (fixtures.plugins.harness imports
# reporting, traps and known_issues): the whole package is marked for assertion rewriting
# before the first of them is imported, as pytest marks each entry below only just before
# importing it.
pytest.register_assert_rewrite("fixtures.plugins")
pytest_plugins = ["fixtures.plugins.heap", "fixtures.plugins.harness", "fixtures.plugins.known_issues",
                  "fixtures.plugins.reporting", "fixtures.plugins.controller"]
