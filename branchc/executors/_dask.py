"""The worker plugin that gives a DaskExecutor's step key to the workers of its scheduler (imported with
distributed; the workers import it by name, so they need branchc, as they do to run steps)."""

from __future__ import annotations

from typing import Any

from ..extras import missing_extra
from ..runtime.steps import install_key, uninstall_key

try:
    from distributed.diagnostics.plugin import WorkerPlugin
except ImportError as error:
    raise missing_extra("dask", error) from None


class StepKeyPlugin(WorkerPlugin):
    """Installs the step key in each worker as it starts (and in those that join later); removes it at
    teardown, when the executor unregisters the plugin."""

    def __init__(self, secret: bytes) -> None:
        self.secret = secret

    def __repr__(self) -> str:  # never the key, in a log or a dashboard
        return "StepKeyPlugin(...)"

    def setup(self, worker: Any) -> None:
        install_key(self.secret)

    def teardown(self, worker: Any) -> None:
        uninstall_key(self.secret)
