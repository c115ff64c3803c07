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
        hold = max(int(hold), 1)
        now = self.env.now
        self.busy_until = max(self.busy_until, now) + hold
        self.recorder.emit(Kind.CHAN_REQUEST, now, self.pe, self.cid, cmd)
        job = _Job(self, cmd, hold, latency, future, on_grant, on_complete)
        request = job.request = self.resource.request()
        if request.triggered:
            # SimPy grants a free resource synchronously; then a command with no
            # latency and no completion work completes with its hold timeout
            # itself, which saves an event per compute command.
            if not latency and on_complete is None:
                return job.granted()
            job.done = self.env.event()
            job.granted()
            return job.done
        job.done = self.env.event()
        request.callbacks.append(job.granted)
        return job.done


class _Job:
    """One command's passage through a channel: grant, hold, release, complete."""

    __slots__ = (
        "channel",
        "cmd",
        "hold",
        "latency",
        "future",
        "on_grant",
        "on_complete",
        "request",
        "done",
    )

    def __init__(self, channel: Channel, cmd, hold, latency, future, on_grant, on_complete):
        self.channel = channel
        self.cmd = cmd
        self.hold = hold
        self.latency = latency
        self.future = future
        self.on_grant = on_grant
        self.on_complete = on_complete
        self.request: simpy.Event | None = None
        #: Fires at completion (None when the hold timeout itself is the completion).
        self.done: simpy.Event | None = None

    def granted(self, _: simpy.Event | None = None) -> simpy.Event:
        channel = self.channel
        env = channel.env
        channel.recorder.emit(Kind.CHAN_GRANT, env.now, channel.pe, channel.cid, self.cmd)
        value = self.on_grant() if self.on_grant is not None else None
        hold_event = env.timeout(self.hold, value)
        hold_event.callbacks.append(self.released)
        return hold_event

    def released(self, hold_event: simpy.Event) -> None:
        channel = self.channel
        channel.busy_cycles += self.hold
        channel.recorder.emit(Kind.CHAN_RELEASE, channel.env.now, channel.pe, channel.cid, self.cmd)
        channel.resource.release(self.request)
        if self.latency:
            channel.env.timeout(self.latency, hold_event._value).callbacks.append(self.completed)
        else:
            self.completed(hold_event)

    def completed(self, event: simpy.Event) -> None:
        channel = self.channel
        value = event._value
        if self.on_complete is not None:
            value = self.on_complete(value)
        channel.recorder.emit(Kind.COMPLETE, channel.env.now, channel.pe, self.cmd, self.future)
        if self.done is not None:
            self.done.succeed(value)
