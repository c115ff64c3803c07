"""The SimPy hardware model: channels, engines, scratch, IPCQ links, processing elements."""

from emulator.hardware.channel import Channel
from emulator.hardware.hbm import HbmStack
from emulator.hardware.mesh import DIRECTIONS, Mesh
from emulator.hardware.pe import ProcessingElement
from emulator.hardware.scratch import Scratch

__all__ = ["Channel", "DIRECTIONS", "HbmStack", "Mesh", "ProcessingElement", "Scratch"]
