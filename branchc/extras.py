"""The optional parts of branchc and the extras that bring them.

`pip install branchc` brings what authoring, compiling, running and serving need. A feature that needs
more names its extra when the package is missing, as one `MissingExtraError`:

    redis     the Redis store (`--store redis://...`, `open_store`)           the redis package
    postgres  the PostgreSQL store (`--store postgresql://...`)              the psycopg and psycopg-pool packages
    handlers  the Monty result-handler engine (`serve --result-handlers`)     the pydantic-monty package
    dask      the dask executor (`--executor dask://...`, `open_executor`)    the distributed package
    otel      exporting traces and metrics (`serve --otel`, `--metrics`)      the opentelemetry-sdk package, and
              (metrics) opentelemetry-exporter-prometheus
    all       every extra above

Such a package is imported only where its feature is used, never at the top of a module that importing
`branchc`, its CLI, the bridge or the stores reaches.
"""

from __future__ import annotations

from .errors import MissingExtraError

__all__ = ["EXTRAS", "MissingExtraError", "missing_extra"]

#: extra -> (feature, the package on the package index, the module it installs)
EXTRAS: dict[str, tuple[str, str, str]] = {
    "redis": ("the Redis store", "redis", "redis"),
    "postgres": ("the PostgreSQL store", "psycopg", "psycopg"),  # and psycopg-pool (postgres.py names it)
    "handlers": ("the Monty result-handler engine", "pydantic-monty", "pydantic_monty"),
    "dask": ("the dask executor", "distributed", "distributed"),
    "otel": ("exporting traces", "opentelemetry-sdk", "opentelemetry.sdk"),
}


def missing_extra(extra: str, error: ImportError, *, part: tuple[str, str, str] | None = None) -> MissingExtraError:
    """The error to raise, `from None`, when an import for `extra`'s feature failed with `error`. A package
    that is not installed gives the plain message; one that is installed but does not import (a broken
    install, a missing dependency of its own) gives the message with the reason. `part`: (feature, package,
    module) of a part of the extra that needs a package of its own (`--metrics`: the Prometheus exporter)."""
    feature, package, module = part or EXTRAS[extra]
    missing = getattr(error, "name", None)
    absent = isinstance(error, ModuleNotFoundError) and (
        missing is None or missing == module or missing.startswith(f"{module}.") or module.startswith(f"{missing}.")
    )
    return MissingExtraError(
        feature, package, extra, module=module, reason="" if absent else f"{type(error).__name__}: {error}"
    )
