"""Mesh: the PEs of a launch, their IPCQ links, and the table of every channel."""

from __future__ import annotations

import simpy

from emulator.config import HardwareConfig
from emulator.hardware.channel import Channel
from emulator.hardware.hbm import HbmStack
from emulator.hardware.pe import ProcessingElement
from emulator.hardware.perturb import Jitter
from emulator.memory import Memory
from emulator.recorder import Recorder

#: IPCQ directions and their (row, column) steps.
DIRECTIONS = {"left": (0, -1), "right": (0, 1), "up": (-1, 0), "down": (1, 0)}


class Mesh:
    """Builds every PE of the config and links neighbours in each direction."""

    def __init__(
        self,
        env: simpy.Environment,
        recorder: Recorder | None,
        config: HardwareConfig,
        memory: Memory,
    ):
        self.env = env
        self.config = config
        #: Every channel of the launch, indexed by its id.
        self.channels: list[Channel] = []

        def new_channel(**kw) -> Channel:
            channel = Channel(env, recorder, cid=len(self.channels), **kw)
            self.channels.append(channel)
            return channel

        self.pes = [
            ProcessingElement(env, recorder, config, memory, pe=i, new_channel=new_channel)
            for i in range(config.num_pes)
        ]
        #: The HBM stacks whose bandwidth groups of PEs share (none unless hbm_stack_pes).
        self.stacks = [
            HbmStack(i, config.hbm_stack_bytes_per_cycle) for i in range(len(config.hbm_stacks))
        ]
        for pe in self.pes if self.stacks else ():
            stack = self.stacks[pe.pe // config.hbm_stack_pes]
            for channel in (*pe.dma_read, *pe.dma_write):
                channel.stack = stack
        rows, cols = config.mesh_rows, config.mesh_cols
        for pe in self.pes:
            r, c = divmod(pe.pe, cols)
            for direction, (dr, dc) in DIRECTIONS.items():
                nr, nc = r + dr, c + dc
                if config.mesh_wrap:
                    nr, nc = nr % rows, nc % cols
                if not (0 <= nr < rows and 0 <= nc < cols):
                    continue
                if (rows == 1 and dr) or (cols == 1 and dc):
                    continue  # a mesh one PE thick has no links across that thickness
                link = new_channel(
                    pe=pe.pe, kind="ipcq", index=len(pe.links), name=f"pe{pe.pe}.ipcq.{direction}"
                )
                pe.links[direction] = (link, self.pes[nr * cols + nc])
        if config.perturb_seed:
            self._perturb(config)

    def _perturb(self, config: HardwareConfig) -> None:
        """Give each DMA channel and IPCQ link its seeded jitter; GEMM and MATH keep theirs.

        An IPCQ link keeps its messages in order and its grants first come, first
        served, at once (a queue whose messages overtook each other would pair
        receives with the wrong sends), so only its latencies move. A DMA write
        channel keeps its order too, grants and landings (the hardware lands one
        channel's stores in issue order: only stores on different write channels may
        land in either order), and its grants may be delayed. A read channel's grants
        may be delayed and reordered within the window: what a load reads is decided
        at its grant, and its data's arrival order changes no byte.
        """
        for channel in self.channels:
            if channel.kind not in ("dma_read", "dma_write", "ipcq"):
                continue
            link = channel.kind == "ipcq"
            fifo = channel.kind != "dma_read"
            channel.jitter = Jitter(
                config.perturb_seed,
                channel.pe,
                channel.cid,
                spread=config.perturb_latency,
                window=1 if fifo else config.perturb_grant_window,
                in_order=fifo,
                max_delay=0 if link else round(config.perturb_grant_delay * config.hbm_latency),
            )
