"""DebuggerCommands: every debugger action in the command palette (ctrl+p), with its key."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider


class DebuggerCommands(Provider):
    """One command per debugger key binding, plus a jump to each finding."""

    def _commands(self) -> list[tuple[str, str, object]]:
        app = self.app
        commands = []
        for title, key, action in app.palette_actions():
            commands.append((title, f"key {key}", partial(app.run_key_action, action)))
        for finding in app.palette_findings():
            commands.append(
                (
                    f"Finding {finding.rule} PE{finding.pe}: {finding.message}",
                    finding.suggestion,
                    partial(app.jump_to_finding, finding),
                )
            )
        return commands

    async def discover(self) -> Hits:
        for title, help_text, callback in self._commands():
            yield DiscoveryHit(title, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, callback in self._commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), callback, help=help_text)
