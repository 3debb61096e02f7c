"""Pictures of runs and split graphs."""

from .timeline import TimelinePrinter

__all__ = ["TimelinePrinter"]
