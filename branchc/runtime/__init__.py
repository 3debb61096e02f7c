"""The runtime: effects, messages, the driver, limits and the client protocol."""

from .client import Client, ElicitAnswer, ElicitRequest, SampleRequest
from .context import Context
from .driver import Event, run_tool
from .effects import All, Branch, CallTool, Effect, Elicit, Log, Notify, Sample
from .elicit import ElicitExchange, ElicitResult
from .errors import (
    BranchcError,
    BranchDepthError,
    BranchError,
    BranchTimeoutError,
    BranchTokenError,
    ClientAnswerError,
    EffectTypeError,
    ElicitValidationError,
    JsonDataError,
    MissingCapabilityError,
    ParamsError,
    ToolCallError,
    ToolCallInterruptedError,
    ToolCallLimitError,
    ToolDefinitionError,
    ToolDepthError,
    ToolNotAllowedError,
    ToolPhaseError,
    ToolTimeoutError,
)
from .limits import Limits
from .messages import (
    AssistantToolCallMessage,
    ExtendedMessage,
    Message,
    ModelPreferences,
    SampleResult,
    ToolCall,
    ToolCallFunction,
    ToolResultMessage,
    ToolSpec,
)
from .tool import Tool, resumable, tool
from .toolcalls import ToolResult


def _register_data_types() -> None:
    """The runtime's data (messages, results, run state) may travel in any snapshot; so may its effects and
    errors, which a branch step run elsewhere yields, raises or is thrown (steps.py)."""
    import dataclasses
    from enum import Enum

    from pydantic import BaseModel

    from ..continuation.registry import register_value_types
    from . import client, context, effects, elicit, errors, limits, machine, messages, toolcalls

    def data(value: object) -> bool:
        return isinstance(value, type) and (
            issubclass(value, (BaseModel, Enum, Exception)) or dataclasses.is_dataclass(value)
        )

    for module in (client, context, effects, elicit, errors, limits, machine, messages, toolcalls):
        register_value_types(*(v for v in vars(module).values() if data(v) and v.__module__ == module.__name__))


_register_data_types()

__all__ = [
    "All",
    "AssistantToolCallMessage",
    "Branch",
    "BranchDepthError",
    "BranchError",
    "BranchTimeoutError",
    "BranchTokenError",
    "BranchcError",
    "CallTool",
    "Client",
    "ClientAnswerError",
    "Context",
    "Effect",
    "EffectTypeError",
    "ElicitAnswer",
    "ElicitExchange",
    "ElicitRequest",
    "ElicitResult",
    "ElicitValidationError",
    "Elicit",
    "Event",
    "ExtendedMessage",
    "JsonDataError",
    "Limits",
    "Log",
    "Message",
    "MissingCapabilityError",
    "ModelPreferences",
    "Notify",
    "ParamsError",
    "Sample",
    "SampleRequest",
    "SampleResult",
    "Tool",
    "ToolCall",
    "ToolCallError",
    "ToolCallFunction",
    "ToolCallInterruptedError",
    "ToolCallLimitError",
    "ToolDefinitionError",
    "ToolDepthError",
    "ToolNotAllowedError",
    "ToolPhaseError",
    "ToolResult",
    "ToolResultMessage",
    "ToolTimeoutError",
    "ToolSpec",
    "resumable",
    "run_tool",
    "tool",
]
