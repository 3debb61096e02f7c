"""branchc: interactive MCP tools as portable, resumable generators.

The public names load on first use (PEP 562), so that what imports only a part of the package
(`branchc compile` finding nothing changed, a compiled module's `branchc.continuation.generator`)
does not load the runtime, pydantic and the codec with it.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .continuation.generator import release
    from .continuation.snapshots import resume, snapshot
    from .errors import MissingExtraError
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
        ToolCallError,
        ToolCallInterruptedError,
        ToolCallLimitError,
        ToolDefinitionError,
        ToolDepthError,
        ToolNotAllowedError,
        ToolPhaseError,
        ToolResult,
        ToolResultMessage,
        ToolSpec,
        ToolTimeoutError,
        content,
        resumable,
        run_tool,
        tool,
    )
    from .runtime.choices import Titled

__version__ = "0.1.0"
__all__ = [
    "AssistantToolCallMessage",
    "BranchDepthError",
    "BranchError",
    "BranchTimeoutError",
    "BranchTokenError",
    "BranchcError",
    "Client",
    "ClientAnswerError",
    "Context",
    "EffectTypeError",
    "ElicitExchange",
    "ElicitResult",
    "ElicitValidationError",
    "ExtendedMessage",
    "JsonDataError",
    "Limits",
    "Message",
    "MissingCapabilityError",
    "MissingExtraError",
    "ModelPreferences",
    "ParamsError",
    "SampleResult",
    "Tool",
    "ToolCall",
    "ToolCallError",
    "ToolCallInterruptedError",
    "ToolCallLimitError",
    "ToolDefinitionError",
    "ToolDepthError",
    "ToolNotAllowedError",
    "ToolPhaseError",
    "ToolResult",
    "ToolResultMessage",
    "ToolSpec",
    "ToolTimeoutError",
    "Titled",
    "__version__",
    "content",
    "release",
    "resumable",
    "resume",
    "run_tool",
    "snapshot",
    "tool",
]

#: where the public names that are not the runtime's own come from
_ELSEWHERE = {
    "release": "continuation.generator",
    "resume": "continuation.snapshots",
    "snapshot": "continuation.snapshots",
    "MissingExtraError": "errors",
    "Titled": "runtime.choices",
}


def __getattr__(name: str) -> Any:
    """A public name. The first one asked for loads them all, as importing the package once did: the
    runtime registers its data types with the snapshot codec when it loads, and `resume` needs them."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    for public in __all__:
        if public not in globals():
            globals()[public] = getattr(import_module(f".{_ELSEWHERE.get(public, 'runtime')}", __name__), public)
    return globals()[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
