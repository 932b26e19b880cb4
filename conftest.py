"""The one conftest: it only wires the harness plugins in fixtures/."""
import importlib

import pytest

from fixtures.cuda_layer.paths import keep_bytecode

# First, before the harness's imports: where the environment turned Python's bytecode
# cache off, this process, the workers and their children keep it in the harness's own.
keep_bytecode()

# The plugin modules import each other at their top (fixtures.plugins.run_control.options
# imports the trap marks and the lane's control, the controller the reporting plugins):
# the whole package is marked for assertion rewriting before the first of them (or the
# package) is imported, as pytest marks each entry below only just before importing it.
pytest.register_assert_rewrite("fixtures.plugins")
from fixtures.plugins import PLUGINS  # noqa: E402  (after the line above)

pytest_plugins = list(PLUGINS)       # the one list of the harness's plugins


def _import_plugins() -> None:
    """The plugins imported here, before pytest registers them: a Ctrl-C meanwhile is a
    Ctrl-C. CPython 3.11 raises whatever a class body's ``__set_name__`` raises (a
    dataclass field's) as a RuntimeError: a Ctrl-C landing there became "a plugin broken
    on import", pytest's internal error, exit status 3. Raised as itself, it ends the
    process as a Ctrl-C during pytest's own start-up does (killed by SIGINT)."""
    try:
        for name in pytest_plugins:
            importlib.import_module(name)
    except RuntimeError as exc:
        cause = exc.__cause__
        while cause is not None and not isinstance(cause, KeyboardInterrupt):
            cause = cause.__cause__
        if cause is None:
            raise
        raise cause from exc


_import_plugins()
