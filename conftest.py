"""The one conftest: it only wires the harness plugins in fixtures/."""
import pytest

from fixtures.cuda_layer.paths import keep_bytecode

# First, before the harness's imports: where the environment turned Python's bytecode
# cache off, this process, the workers and their children keep it in the harness's own.
keep_bytecode()

# The plugin modules import each other at their top (fixtures.plugins.harness imports
# reporting, traps and known_issues): the whole package is marked for assertion rewriting
# before the first of them is imported, as pytest marks each entry below only just before
# importing it.
pytest.register_assert_rewrite("fixtures.plugins")
pytest_plugins = ["fixtures.plugins.heap", "fixtures.plugins.harness", "fixtures.plugins.known_issues",
                  "fixtures.plugins.every_gpu", "fixtures.plugins.reporting", "fixtures.plugins.controller"]
