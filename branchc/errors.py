"""The root of every error branchc raises, so callers can catch them all at once."""

from __future__ import annotations

__all__ = ["BranchcError", "MissingExtraError"]


class BranchcError(Exception):
    """Base of branchc's own errors."""


class MissingExtraError(BranchcError, ImportError):
    """A feature whose package is not installed (branchc/extras.py). The message names the package and the
    extra that brings it: "the Redis store needs the redis package: pip install 'branchc[redis]'". It is an
    ImportError too, so code that guards an import with `except ImportError` still catches it."""

    def __init__(self, feature: str, package: str, extra: str, *, module: str | None = None, reason: str = "") -> None:
        fix = f"pip install 'branchc[{extra}]'"
        if reason:
            message = f"{feature} needs the {package} package, which does not import here ({reason}); {fix}"
        else:
            message = f"{feature} needs the {package} package: {fix}"
        super().__init__(message, name=module)
        self.feature = feature
        self.package = package
        self.extra = extra
        self.reason = reason

    def __reduce__(self):  # type: ignore[override]  # rebuilt from its parts, not from the message
        return (_rebuild, (self.feature, self.package, self.extra, self.name, self.reason))


def _rebuild(feature: str, package: str, extra: str, module: str | None, reason: str) -> MissingExtraError:
    return MissingExtraError(feature, package, extra, module=module, reason=reason)
