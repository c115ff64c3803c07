"""ProcessingElement: one PE's DMA channels, GEMM and MATH engines, scratch and IPCQ endpoints."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import simpy

from emulator.config import HardwareConfig
from emulator.dtypes import to_numpy
from emulator.hardware.channel import Channel
from emulator.hardware.scratch import Scratch
from emulator.memory import Memory
from emulator.recorder import Recorder, emitter
from emulator.trace.schema import Kind

# Kind members as module constants: reading Kind.X costs a descriptor lookup per event.
_IPCQ_SEND = Kind.IPCQ_SEND
_IPCQ_RECV = Kind.IPCQ_RECV
_COMPLETE = Kind.COMPLETE


class Message:
    """A tensor travelling over an IPCQ link."""

    __slots__ = ("cmd", "src_pe", "data")

    def __init__(self, cmd: int, src_pe: int, data: np.ndarray):
        self.cmd = cmd
        self.src_pe = src_pe
        self.data = data


class ProcessingElement:
    """The hardware of one PE; every method returns a SimPy event fired at completion."""

    def __init__(
        self,
        env: simpy.Environment,
        recorder: Recorder | None,
        config: HardwareConfig,
        memory: Memory,
        *,
        pe: int,
        new_channel: Callable[..., Channel],
    ):
        self.env = env
        #: ``recorder.emit``, None when nothing is recorded.
        self._emit = emitter(recorder)
        self.config = config
        self.memory = memory
        self.pe = pe
        self.dma_read = [
            new_channel(pe=pe, kind="dma_read", index=i, name=f"pe{pe}.dma_read{i}")
            for i in range(config.dma_read_channels)
        ]
        self.dma_write = [
            new_channel(pe=pe, kind="dma_write", index=i, name=f"pe{pe}.dma_write{i}")
            for i in range(config.dma_write_channels)
        ]
        self.gemm = new_channel(pe=pe, kind="gemm", index=0, name=f"pe{pe}.gemm")
        self.math = new_channel(pe=pe, kind="math", index=0, name=f"pe{pe}.math")
        self.scratch = Scratch(env, recorder, pe=pe, capacity=config.scratch_bytes)
        #: Outgoing IPCQ links by direction, filled in by the mesh.
        self.links: dict[str, tuple[Channel, ProcessingElement]] = {}
        #: Arrived messages not yet matched, by the direction they came from.
        self.inbox: dict[str, deque[Message]] = {}
        #: Receives waiting for a message, by direction: (cmd, future, event).
        self.pending_recv: dict[str, deque[tuple[int, int, simpy.Event]]] = {}

    def transfer_cycles(self, nbytes: int) -> int:
        return max(1, math.ceil(nbytes / self.config.hbm_bytes_per_cycle))

    @staticmethod
    def pick(channels: list[Channel]) -> Channel:
        """The channel that frees up first (lowest index on ties): a shared FIFO in effect."""
        if len(channels) == 1:
            return channels[0]
        return min(channels, key=_busy_until)

    def read(
        self, cmd: int, future: int, addr: int, shape: tuple[int, ...], dtype: str, nbytes: int
    ) -> simpy.Event:
        """DMA read from HBM; the event's value is the array, read when the channel is granted.

        The caller has checked the range (``Memory.check``) and the shape; ``dtype`` is a
        known dtype name.
        """
        channel = self.pick(self.dma_read)
        memory, np_dtype = self.memory, to_numpy(dtype)
        return channel.submit(
            cmd,
            self.transfer_cycles(nbytes),
            self.config.hbm_latency,
            future=future,
            on_grant=lambda: memory.read(addr, nbytes, np_dtype, shape),
            nbytes=nbytes,
        )

    def write(self, cmd: int, future: int, addr: int, data: np.ndarray) -> simpy.Event:
        """DMA write to HBM; the bytes land in memory at completion."""
        channel = self.pick(self.dma_write)

        def land(_: Any) -> None:
            self.memory.write(addr, data)

        return channel.submit(
            cmd,
            self.transfer_cycles(data.nbytes),
            self.config.hbm_latency,
            future=future,
            on_complete=land,
            nbytes=data.nbytes,
        )

    def gemm_cycles(self, macs: int) -> int:
        return max(1, math.ceil(macs / self.config.gemm_macs_per_cycle))

    def math_cycles(self, elements: int) -> int:
        return max(1, math.ceil(elements / self.config.math_elems_per_cycle))

    def compute(self, engine: Channel, cmd: int, cycles: int) -> simpy.Event:
        """Occupy the GEMM or MATH engine for ``cycles``."""
        return engine.submit(cmd, cycles)

    def send(self, cmd: int, future: int, direction: str, data: np.ndarray) -> simpy.Event:
        """Send ``data`` to the neighbour in ``direction``; the event fires on delivery."""
        link, dest = self.links[direction]
        arrive_from = OPPOSITE[direction]
        env = self.env

        def enter_link() -> None:
            if self._emit is not None:
                self._emit(_IPCQ_SEND, env.now, self.pe, cmd, dest.pe, data.nbytes)

        def deliver(_: Any) -> None:
            dest.deliver(arrive_from, Message(cmd, self.pe, data))

        cycles = max(1, math.ceil(data.nbytes / self.config.ipcq_bytes_per_cycle))
        return link.submit(
            cmd,
            cycles,
            self.config.ipcq_latency,
            future=future,
            on_grant=enter_link,
            on_complete=deliver,
        )

    def deliver(self, direction: str, message: Message) -> None:
        """A message arrives from ``direction``: match it to the oldest pending receive."""
        pending = self.pending_recv.get(direction)
        if pending:
            cmd, future, event = pending.popleft()
            self._match(cmd, future, event, message)
        else:
            self.inbox.setdefault(direction, deque()).append(message)

    def recv(self, cmd: int, future: int, direction: str) -> simpy.Event:
        """Receive the next message from ``direction``; the event's value is its array."""
        event = self.env.event()
        waiting = self.inbox.get(direction)
        if waiting:
            self._match(cmd, future, event, waiting.popleft())
        else:
            self.pending_recv.setdefault(direction, deque()).append((cmd, future, event))
        return event

    def _match(self, cmd: int, future: int, event: simpy.Event, message: Message) -> None:
        emit = self._emit
        if emit is not None:
            now = self.env.now
            emit(_IPCQ_RECV, now, self.pe, message.cmd, message.src_pe, future)
            emit(_COMPLETE, now, self.pe, cmd, future)
        event.succeed(message.data)


def _busy_until(channel: Channel) -> int:
    return channel.busy_until


OPPOSITE = {"left": "right", "right": "left", "up": "down", "down": "up"}
