"""Channel: a DMA channel, engine or IPCQ link; a SimPy resource one command holds at a time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import simpy

from emulator.recorder import Recorder
from emulator.trace.schema import Kind


class Channel:
    """A capacity-1 SimPy resource; each command requests it, holds it, releases it, completes.

    A command holds the channel for ``hold`` cycles (that is what serialises
    commands on one channel) and completes ``latency`` cycles after release
    (latency pipelines: the next command's hold overlaps it). Every step is
    recorded: request, grant, release, complete.
    """

    def __init__(
        self,
        env: simpy.Environment,
        recorder: Recorder,
        *,
        cid: int,
        pe: int,
        kind: str,
        index: int,
        name: str,
    ):
        self.env = env
        self.recorder = recorder
        #: Index in the launch's channel table (what trace events name).
        self.cid = cid
        self.pe = pe
        #: One of schema.CHANNEL_KINDS.
        self.kind = kind
        #: Index among the PE's channels of the same kind (read channel 0, 1, ...).
        self.index = index
        self.name = name
        self.resource = simpy.Resource(env, capacity=1)
        #: Cycle at which every command submitted so far will have released the channel.
        self.busy_until = 0
        #: Cycles the channel has been held in total.
        self.busy_cycles = 0

    def describe(self) -> dict[str, Any]:
        """The channel's entry in a trace header's channel table."""
        return {
            "id": self.cid,
            "pe": self.pe,
            "kind": self.kind,
            "index": self.index,
            "name": self.name,
        }

    def submit(
        self,
        cmd: int,
        hold: int,
        latency: int = 0,
        *,
        future: int = -1,
        on_grant: Callable[[], Any] | None = None,
        on_complete: Callable[[Any], Any] | None = None,
    ) -> simpy.Event:
        """Queue command ``cmd``; the returned event fires at completion.

        ``on_grant()`` runs when the channel is granted and its result becomes
        the command's value; ``on_complete(value)`` runs at completion, before
        the event fires, and may replace the value.
        """
        env = self.env
        hold = max(int(hold), 1)
        self.busy_until = max(self.busy_until, env.now) + hold
        self.recorder.emit(Kind.CHAN_REQUEST, env.now, self.pe, self.cid, cmd)
        done = env.event()
        request = self.resource.request()

        def granted(_: simpy.Event) -> None:
            self.recorder.emit(Kind.CHAN_GRANT, env.now, self.pe, self.cid, cmd)
            value = on_grant() if on_grant is not None else None
            env.timeout(hold).callbacks.append(lambda _: released(value))

        def released(value: Any) -> None:
            self.busy_cycles += hold
            self.recorder.emit(Kind.CHAN_RELEASE, env.now, self.pe, self.cid, cmd)
            self.resource.release(request)
            if latency:
                env.timeout(latency).callbacks.append(lambda _: completed(value))
            else:
                completed(value)

        def completed(value: Any) -> None:
            if on_complete is not None:
                value = on_complete(value)
            self.recorder.emit(Kind.COMPLETE, env.now, self.pe, cmd, future)
            done.succeed(value)

        request.callbacks.append(granted)
        return done
