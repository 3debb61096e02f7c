"""The terminal timeline of a run, drawn from the runtime's events as they happen.

Drawn like the seed's branching diagram: each step hangs off its branch's rail, a branch
forks off its parent's rail (`├─┬`) one level deeper, and ends by reducing to one value
(`╰─┘`) that goes back to the parent. Concurrent branches carry their id, so interleaved
lines stay readable.
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markup import escape

__all__ = ["TimelinePrinter"]

_ACTION_STYLE = {"accept": "green", "decline": "yellow", "cancel": "red"}


def _short(value: Any, width: int = 100) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = text.replace("\n", " ⏎ ")
    return text if len(text) <= width else text[: width - 1] + "…"


class TimelinePrinter:
    """An `on_event` callback for `run_tool` that prints one line (or two) per step."""

    def __init__(self, console: Console, *, width: int = 100) -> None:
        self.console = console
        self.width = width

    def __call__(self, event: dict[str, Any]) -> None:
        handler = getattr(self, "_on_" + event["event"], None)
        if handler is not None:
            handler(event)

    def _line(self, depth: int, markup: str, branch: str | None = None, joint: str = "├─ ") -> None:
        rail = "│ " * (depth + 1)
        tag = f"[dim]\\[{branch}][/] " if branch and depth > 0 else ""
        self.console.print(f"[dim]{rail}{joint}[/]{tag}{markup}", highlight=False, soft_wrap=True)

    def _detail(self, depth: int, markup: str) -> None:
        self.console.print(f"[dim]{'│ ' * (depth + 2)}  [/]{markup}", highlight=False, soft_wrap=True)

    def _on_start(self, e: dict[str, Any]) -> None:
        params = escape(_short(e["params"], self.width))
        self.console.print(f"[bold]▶ {escape(e['tool'])}[/]  [dim]call {escape(e['call_id'])}  params[/] {params}")

    def _on_handoff(self, e: dict[str, Any]) -> None:
        self.console.print(f"[dim]├ before → handoff[/] {escape(_short(e['handoff'], self.width))}", highlight=False)
        self.console.print("[dim]├ client[/]")

    def _on_log(self, e: dict[str, Any]) -> None:
        self._line(e["depth"], f"[cyan]log {e['level']}[/]  {escape(e['message'])}", e["branch"])

    def _on_notify(self, e: dict[str, Any]) -> None:
        progress = ""
        if e.get("progress") is not None:
            progress = f" {e['progress']:g}" + (f"/{e['total']:g}" if e.get("total") is not None else "")
        self._line(e["depth"], f"[cyan]progress{progress}[/]  {escape(e['message'])}", e["branch"])

    def _on_branch(self, e: dict[str, Any]) -> None:
        context = "inherited context" if e["inherit_messages"] else "fresh context"
        self._line(
            e["depth"] - 1,
            f"[magenta]branch {escape(e['name'])}[/] [dim]\\[{e['branch']}] ({context})[/]",
            joint="├─┬ ",
        )

    def _on_branch_end(self, e: dict[str, Any]) -> None:
        if "error" in e:
            self._line(
                e["depth"] - 1, f"[red]✗ raised {escape(_short(e['error'], self.width))}[/]", e["branch"], "│ ╰─┘ "
            )
        else:
            result = escape(_short(e["result"], self.width))
            self._line(e["depth"] - 1, f"[magenta]reduces to[/] {result}", e["branch"], "│ ╰─┘ ")

    def _on_sample(self, e: dict[str, Any]) -> None:
        messages = e["request"]["messages"]
        last = messages[-1].get("content") if messages else ""
        mode = "" if e["tracked"] else f" [dim]({len(messages)} messages)[/]"
        self._line(
            e["depth"], f"[blue]sample #{e['number']}[/]{mode} {escape(_short(last or '', self.width))}", e["branch"]
        )
        result = e["result"]
        answer = result.get("text", "")
        if result.get("tool_calls"):
            answer += " " + json.dumps([c["function"] for c in result["tool_calls"]])
        self._detail(e["depth"], f"[green]→[/] {escape(_short(answer, self.width))}")

    def _on_elicit(self, e: dict[str, Any]) -> None:
        request, answer = e["request"], e["answer"]
        self._line(
            e["depth"],
            f"[yellow]elicit #{e['seq']} {escape(request['key'])}[/] {escape(_short(request['message'], self.width))}",
            e["branch"],
        )
        action = answer["action"]
        content = f" {escape(_short(answer['content'], self.width))}" if answer.get("content") is not None else ""
        self._detail(e["depth"], f"[{_ACTION_STYLE[action]}]→ {action}[/]{content}")

    def _on_call_tool(self, e: dict[str, Any]) -> None:
        name = e["name"] if e.get("server") is None else f"{e['server']}:{e['name']}"
        arguments = escape(_short(e["arguments"], self.width))
        self._line(e["depth"], f"[green]call_tool {escape(name)}[/] {arguments}", e["branch"])

    def _on_tool_result(self, e: dict[str, Any]) -> None:
        if "branch" in e:
            shown = "[red]→ error result[/]" if e.get("is_error") else "[dim]→ result[/]"
            self._line(e["depth"], f"{shown} [dim]{escape(e['key'])}[/]", e["branch"])

    def _on_timeout(self, e: dict[str, Any]) -> None:
        self._line(e["depth"], "[red]timeout[/]", e["branch"])

    def _on_halt(self, e: dict[str, Any]) -> None:
        self._line(e["depth"], "[red]halted[/] [dim](cancelled at its yield; finally blocks run)[/]", e["branch"])

    def _on_client_result(self, e: dict[str, Any]) -> None:
        self.console.print(
            f"[dim]│ ╰─[/] [magenta]returns[/] {escape(_short(e['result'], self.width))}",
            highlight=False,
            soft_wrap=True,
        )

    def _on_result(self, e: dict[str, Any]) -> None:
        self.console.print("[dim]└ after → result[/]")
