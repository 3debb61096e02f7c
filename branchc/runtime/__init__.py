"""The runtime: effects, messages, the driver, limits and the client protocol."""

from .client import Client, ElicitAnswer, ElicitRequest, SampleRequest
from .context import Context
from .driver import Event, run_tool
from .effects import All, Branch, Effect, Elicit, Log, Notify, Sample
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
    ToolDefinitionError,
    ToolPhaseError,
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

__all__ = [
    "All",
    "AssistantToolCallMessage",
    "Branch",
    "BranchDepthError",
    "BranchError",
    "BranchTimeoutError",
    "BranchTokenError",
    "BranchcError",
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
    "ToolCallFunction",
    "ToolDefinitionError",
    "ToolPhaseError",
    "ToolResultMessage",
    "ToolSpec",
    "resumable",
    "run_tool",
    "tool",
]
