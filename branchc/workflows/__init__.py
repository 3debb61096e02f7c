"""The YAML front end: workflows (`workflow:` files) compiled to the same resumable machines as a
Python tool. `check_workflow` reports every problem at its `file.yaml:line:col`; `workflow_build` writes
each workflow as a generated tool module and compiles it through the splitter, like any tool source."""

from .check import WorkflowError, check_workflow, load_workflow
from .compile import find_workflows, generate_module, is_workflow_file, load_workflow_tool, workflow_build
from .model import Workflow

__all__ = [
    "Workflow",
    "WorkflowError",
    "check_workflow",
    "find_workflows",
    "generate_module",
    "is_workflow_file",
    "load_workflow",
    "load_workflow_tool",
    "workflow_build",
]
