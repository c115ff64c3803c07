"""Channel: a DMA channel, engine or IPCQ link; a capacity-1 FIFO one command holds at a time."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any

import simpy

from emulator.hardware.hbm import HbmStack
from emulator.hardware.perturb import Jitter
from emulator.recorder import RELEASE_COMPLETE, RELEASE_GRANT, Recorder, compound_emitter, emitter
from emulator.trace.schema import Kind

# Kind members as module constants: reading Kind.X costs a descriptor lookup per event.
_REQUEST, _GRANT, _RELEASE, _COMPLETE, _HBM_SHARE = (
    Kind.CHAN_REQUEST,
    Kind.CHAN_GRANT,
    Kind.CHAN_RELEASE,
    Kind.COMPLETE,
    Kind.HBM_SHARE,
)

#: A command: (cmd, hold, latency, future, on_grant, on_complete, done event or None,
#: bytes it moves through a shared HBM stack).
Job = tuple[int, int, int, int, Callable[[], Any] | None, Callable[[Any], Any] | None, Any, int]


class Channel:
    """A capacity-1 FIFO; each command requests it, holds it, releases it, completes.

    A command holds the channel for ``hold`` cycles (that is what serialises
    commands on one channel) and completes ``latency`` cycles after release
    (latency pipelines: the next command's hold overlaps it). Every step is
    recorded: request, grant, release, complete.

    A DMA channel whose PE shares an HBM stack (``stack``) learns its command's
    hold at the grant: the longer of its own transfer time and the wait for, plus
    the length of, the stack's slot (see HbmStack), recorded as HBM_SHARE right
    after the grant.

    The channel behaves exactly as a ``simpy.Resource(capacity=1)`` that each
    command requests, holds and releases, down to the order of same-cycle events,
    without the resource's bookkeeping events: a free channel is granted at
    once; a release schedules the grant of the oldest waiting command as that
    resource does (a release event, then a grant event, each queued behind the
    events of the same cycle already scheduled), and grants at once when those
    two would be the next events anyway (``env.peek()`` is later than now).
    """

    # Slots (here and in the PE's scratch, tl and futures): on a mesh of hundreds of PEs
    # each event touches objects of a PE whose lines left the cache since its last one,
    # and a slot is read from the object itself, not from a values array beside it.
    __slots__ = (
        "env",
        "_emit",
        "_emit_compound",
        "cid",
        "pe",
        "kind",
        "index",
        "name",
        "busy_until",
        "busy_cycles",
        "busy",
        "queue",
        "_holder",
        "stack",
        "jitter",
    )

    def __init__(
        self,
        env: simpy.Environment,
        recorder: Recorder | None,
        *,
        cid: int,
        pe: int,
        kind: str,
        index: int,
        name: str,
    ):
        self.env = env
        #: ``recorder.emit``, None when nothing is recorded.
        self._emit = emitter(recorder)
        #: ``recorder.emit_compound``, None likewise.
        self._emit_compound = compound_emitter(recorder)
        #: Index in the launch's channel table (what trace events name).
        self.cid = cid
        self.pe = pe
        #: One of schema.CHANNEL_KINDS.
        self.kind = kind
        #: Index among the PE's channels of the same kind (read channel 0, 1, ...).
        self.index = index
        self.name = name
        #: Cycle at which every command submitted so far will have released the channel.
        self.busy_until = 0
        #: Cycles the channel has been held in total.
        self.busy_cycles = 0
        #: Whether a command holds the channel (or has been granted it, its grant pending).
        self.busy = False
        #: Commands waiting for the channel, oldest first.
        self.queue: deque[Job] = deque()
        #: The command holding the channel.
        self._holder: Job | None = None
        #: The HBM stack whose bandwidth this DMA channel's transfers share (set by the
        #: mesh); None: the channel's own rate is all that limits them.
        self.stack: HbmStack | None = None
        #: The seeded perturbation of this channel's latencies and grant order (set by the
        #: mesh on a perturbed run); None: the nominal timing.
        self.jitter: Jitter | None = None

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
        recorded: bool = False,
        nbytes: int = 0,
    ) -> simpy.Event:
        """Queue command ``cmd``; the returned event fires at completion.

        ``on_grant()`` runs when the channel is granted and its result becomes
        the command's value; ``on_complete(value)`` runs at completion, before
        the event fires, and may replace the value. ``nbytes``: what a DMA
        transfer moves (its share of a shared HBM stack).

        ``recorded``: the caller has recorded this call's CHAN_REQUEST, and its
        CHAN_GRANT too if the channel is free (``not busy and not queue``), in a
        compound record with the command's ISSUE. Only for commands without
        latency or ``on_complete`` (compute), whose free-channel grant is at once.
        """
        if type(hold) is not int or hold < 1:
            hold = max(int(hold), 1)
        env = self.env
        now = env.now
        busy_until = self.busy_until
        self.busy_until = (busy_until if busy_until > now else now) + hold
        if self._emit is not None and not recorded:
            self._emit(_REQUEST, now, self.pe, self.cid, cmd)
        if not self.busy and not self.queue:
            self.busy = True
            if not latency and on_complete is None and self.stack is None and self.jitter is None:
                # Nothing happens between release and completion: the hold's own
                # event is the completion, which saves an event per compute command.
                # (A timeout counts as triggered from its creation: tl.wait asks
                # whether it was processed.)
                # (_grant, inlined: this is every compute command's path.)
                if self._emit is not None and not recorded:
                    self._emit(_GRANT, now, self.pe, self.cid, cmd)
                self._holder = (cmd, hold, 0, future, on_grant, None, None, 0)
                hold_event = env.timeout(hold, on_grant() if on_grant is not None else None)
                hold_event.callbacks.append(self._released)
                return hold_event
            done = env.event()
            job = (cmd, hold, latency, future, on_grant, on_complete, done, nbytes)
            if self.jitter is None:
                self._grant(job)
            else:
                self.queue.append(job)
                self._grant_after_delay()
            return done
        done = env.event()
        self.queue.append((cmd, hold, latency, future, on_grant, on_complete, done, nbytes))
        if not self.busy:
            # Released this cycle, its grant not yet made: the oldest waiting command
            # gets the channel now, as a resource grants its queue on any request.
            if self.jitter is None:
                self._grant_later(self._take())
            else:
                self._grant_after_delay()
        return done

    def _grant(
        self, job: Job, _event: simpy.Event | None = None, *, recorded: bool = False
    ) -> simpy.Event:
        """Start ``job``'s hold; the returned event fires at its release (``recorded``:
        its CHAN_GRANT is recorded already)."""
        env = self.env
        if self._emit is not None and not recorded:
            self._emit(_GRANT, env.now, self.pe, self.cid, job[0])
        if self.stack is not None:
            job = self._share(job)
        self._holder = job
        on_grant = job[4]
        hold_event = env.timeout(job[1], on_grant() if on_grant is not None else None)
        hold_event.callbacks.append(self._released)
        return hold_event

    def _share(self, job: Job) -> Job:
        """Give ``job``, just granted, its slot of the shared HBM stack; the job with its
        hold stretched to the slot's end if that is later than its own."""
        now = self.env.now
        stack = self.stack
        wait, slot = stack.reserve(now, job[7])
        if self._emit is not None:
            self._emit(_HBM_SHARE, now, self.pe, job[0], stack.index, wait, slot)
        stretch = wait + slot - job[1]
        if stretch <= 0:
            return job
        self.busy_until += stretch  # every command queued behind releases that much later
        return (job[0], job[1] + stretch, *job[2:])

    def _grant_later(self, job: Job) -> None:
        """Grant ``job`` in an event of its own, behind those this cycle already has."""
        self.busy = True
        self.env.timeout(0).callbacks.append(partial(self._grant, job))

    def _grant_after_delay(self) -> None:
        """On a perturbed channel: stay idle for the delay the jitter draws, then grant the
        waiting command the jitter picks among those waiting *then*.

        The pick is made when the channel starts its transfer, not when the delay
        starts: a command that arrives during the delay (the channel still idle, taken
        by traffic the model does not see) competes for the grant as every waiting
        command does, so with a window above 1 it may go before an older one.
        """
        self.busy = True
        delay = self.jitter.grant_delay()
        self.busy_until += delay
        self.env.timeout(delay).callbacks.append(self._grant_picked)

    def _grant_picked(self, _event: simpy.Event) -> None:
        self._grant(self._take())

    def _released(self, hold_event: simpy.Event) -> None:
        cmd, hold, latency, future, _, on_complete, done, _ = self._holder
        self._holder = None
        self.busy_cycles += hold
        env = self.env
        now = env.now
        self.busy = False
        grant_next = False
        if self.queue:
            # The release event would be the next one when no other event waits in this
            # cycle and no caller's callback follows this one (the hold event is ours
            # when there is a done event): then doing its work at the end of this
            # callback is the same.
            grant_next = done is not None and env.peek() > now and self.jitter is None
            if not grant_next:
                env.timeout(0).callbacks.append(self._grant_next)
        # The release is recorded with what follows it at once, when that is one event
        # of this channel: nothing else is recorded between (scheduling records nothing).
        if latency and self.jitter is not None:
            latency = self.jitter.latency(latency, now)
        if latency:
            landing = env.timeout(latency, hold_event._value)
            landing.callbacks.append(partial(self._completed, cmd, future, on_complete, done))
            if grant_next:
                # _grant_next's work: the landing is later than now, so the grant is now.
                job = self._take()
                self.busy = True
                if self._emit_compound is not None:
                    self._emit_compound(
                        RELEASE_GRANT, now, self.pe, self.cid, cmd, self.cid, job[0]
                    )
                self._grant(job, recorded=True)
            elif self._emit is not None:
                self._emit(_RELEASE, now, self.pe, self.cid, cmd)
        elif done is None:  # a compute command: nothing to do at completion but record it
            if self._emit_compound is not None:
                self._emit_compound(RELEASE_COMPLETE, now, self.pe, self.cid, cmd, cmd, future)
        else:
            if self._emit is not None:
                self._emit(_RELEASE, now, self.pe, self.cid, cmd)
            self._completed(cmd, future, on_complete, done, hold_event)
            if grant_next:
                self._grant_next()

    def _take(self) -> Job:
        """The waiting command to grant next: the oldest, or the jitter's pick."""
        queue = self.queue
        if self.jitter is None or len(queue) < 2:
            return queue.popleft()
        position = self.jitter.pick(len(queue))
        job = queue[position]
        del queue[position]
        return job

    def _grant_next(self, _event: simpy.Event | None = None) -> None:
        """The oldest waiting command gets the free channel (a resource's release event)."""
        if self.busy or not self.queue:
            return
        if self.jitter is not None:
            self._grant_after_delay()
            return
        job = self._take()
        if self.env.peek() > self.env.now:
            # Its grant event would be the next one: grant it now.
            self.busy = True
            self._grant(job)
        else:
            self._grant_later(job)

    def _completed(
        self,
        cmd: int,
        future: int,
        on_complete: Callable[[Any], Any] | None,
        done: simpy.Event | None,
        event: simpy.Event,
    ) -> None:
        value = event._value
        if on_complete is not None:
            value = on_complete(value)
        if self._emit is not None:
            self._emit(_COMPLETE, self.env.now, self.pe, cmd, future)
        if done is not None:
            done.succeed(value)
