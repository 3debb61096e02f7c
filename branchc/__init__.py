"""branchc: interactive MCP tools as portable, resumable generators."""

from .runtime import (
    AssistantToolCallMessage,
    BranchcError,
    BranchDepthError,
    BranchError,
    BranchTimeoutError,
    BranchTokenError,
    Client,
    ClientAnswerError,
    Context,
    EffectTypeError,
    ElicitExchange,
    ElicitResult,
    ElicitValidationError,
    ExtendedMessage,
    JsonDataError,
    Limits,
    Message,
    MissingCapabilityError,
    ModelPreferences,
    ParamsError,
    SampleResult,
    Tool,
    ToolCall,
    ToolDefinitionError,
    ToolPhaseError,
    ToolResultMessage,
    ToolSpec,
    resumable,
    run_tool,
    tool,
)

__version__ = "0.1.0"
__all__ = [
    "AssistantToolCallMessage", "BranchDepthError", "BranchError", "BranchTimeoutError", "BranchTokenError",
    "BranchcError", "Client", "ClientAnswerError", "Context", "EffectTypeError", "ElicitExchange", "ElicitResult",
    "ElicitValidationError", "ExtendedMessage", "JsonDataError", "Limits", "Message", "MissingCapabilityError",
    "ModelPreferences", "ParamsError", "SampleResult", "Tool", "ToolCall", "ToolDefinitionError", "ToolPhaseError",
    "ToolResultMessage", "ToolSpec", "__version__", "resumable", "run_tool", "tool",
]
