"""A stalled receive followed across PEs: the send it waited for, why that was late, the root."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from kernels_across_pes import SQUARE, relay, ring_relay, ring_waits_first, run_relay
from kernels_for_findings import line_of

import kbdebug.analysis.wait_chain as wait_chain
from emulator.errors import DeadlockError
from kbdebug.analysis import Analysis
from kbdebug.analysis.wait_chain import (
    CYCLE,
    DEPTH,
    STALL,
    TRANSIT,
    UNMATCHED,
    WORK,
    WaitChains,
)
from kbdebug.cli import main
from kbdebug.replay import Replay

PES, N_DOTS = 4, 16


@pytest.fixture(scope="module")
def relayed(tmp_path_factory):
    path = tmp_path_factory.mktemp("relay") / "relay.kbt"
    config = run_relay(path, pes=PES, n_dots=N_DOTS)
    return path, config


def wait_event(replay: Replay, pe: int) -> int:
    """The WAIT_BEGIN of ``pe``'s receive."""
    futs = replay.index.futures
    (f,) = [f for f in range(len(futs.cmd)) if futs.pe[f] == pe and futs.wait_begin[f] >= 0]
    return int(futs.wait_begin[f])


def test_the_last_receive_goes_back_to_the_first_pe_s_work(relayed):
    path, config = relayed
    replay = Replay.open(path, cache=False)
    analysis = Analysis(replay)
    chain = analysis.wait_chain(wait_event(replay, PES - 1))
    dot = math.ceil(math.prod((*SQUARE, SQUARE[1])) / config.gemm_macs_per_cycle)
    # PE 3 waited for PE 2's send, late because PE 2 waited for PE 1's, ... PE 0's work.
    assert [(link.pe, link.sender) for link in chain.links] == [(3, 2), (2, 1), (1, 0)]
    futs, c = replay.index.futures, replay.index.columns
    for link in chain.links:
        assert link.wait_loc.line == line_of(relay, "wait")
        assert link.send_loc.line == line_of(relay, "send")
        assert link.issued == int(c.time[link.send_event])
        assert link.stall == int(futs.stall[c.fut[link.wait_event]]) > 0
        assert link.late == link.issued - link.waited_at > 0
        if link.sender > 0:  # the sender worked its GEMMs between its own wait and the send
            assert link.work == N_DOTS * dot
    assert chain.root.kind == WORK and chain.root.pe == 0
    assert chain.root.event == chain.links[-1].send_event
    # PE 0 never stalled: its work is its kernel's start to its send, at least its GEMMs.
    assert chain.root.cycles == chain.links[-1].issued - analysis.bounds[0].start
    assert N_DOTS * dot <= chain.root.cycles <= N_DOTS * dot + 4 * config.issue_cycles + 64
    # Each wait stalled about its sender's stall plus its sender's work: the chain adds up.
    stalls = [link.stall for link in chain.links]
    assert stalls == sorted(stalls, reverse=True)
    assert stalls[0] > (PES - 1) * N_DOTS * dot


def test_a_wait_that_is_not_a_receive_is_its_own_root_and_other_events_have_none(relayed):
    path, _ = relayed
    replay = Replay.open(path, cache=False)
    chains = WaitChains(replay.index)
    assert chains.chain(0) is None  # KERNEL_START
    assert chains.chain(-1) is None and chains.chain(replay.index.n_events) is None
    # A receive that did not stall has no links.
    for event in np.flatnonzero(replay.index.columns.kind == 9).tolist():
        chain = chains.chain(event)
        assert chain is not None
        assert chain.links or chain.root.kind in (STALL, "not-stalled")


def test_the_chain_is_bounded_by_its_depth_and_never_loops(relayed, monkeypatch):
    path, _ = relayed
    replay = Replay.open(path, cache=False)
    last = wait_event(replay, PES - 1)
    monkeypatch.setattr(wait_chain, "MAX_LINKS", 2)
    cut = WaitChains(replay.index).chain(last)
    assert len(cut.links) == 2 and cut.root.kind == DEPTH
    monkeypatch.undo()
    # A forged index whose PE 1 receive "matched" PE 2's send: PE 2's wait comes round.
    chains = WaitChains(replay.index)
    futs, cmds = replay.index.futures, replay.index.commands
    pe1 = int(replay.index.columns.fut[wait_event(replay, 1)])
    pe2_send = [c for c in range(len(cmds.pe)) if cmds.pe[c] == 2 and cmds.future[c] >= 0]
    pe2_send = [c for c in pe2_send if replay.index.string(int(cmds.op[c])) == "send"]
    chains._send_of[pe1] = pe2_send[0]
    looped = chains.chain(last)
    assert looped.root.kind == CYCLE and len(looped.links) == 3
    assert len({link.wait_event for link in looped.links}) == len(looped.links)
    assert int(futs.pe[pe1]) == 1


def test_report_names_the_chain_in_text_and_json(relayed, capsys):
    path, _ = relayed
    assert main(["report", str(path)]) == 0
    text = capsys.readouterr().out
    section = text[text.index("waits on other PEs") :].split("\n\n")[0].splitlines()
    wait, send = line_of(relay, "wait"), line_of(relay, "send")
    assert section[1].startswith(f"  PE 3 kernels_across_pes.py:{wait} waited ")
    assert f"for PE 2's send at kernels_across_pes.py:{send} (issued cycle " in section[1]
    assert section[2].strip().startswith("late because PE 2 waited ")
    assert section[-1].strip().startswith("root: PE 0's own work (")
    assert main(["report", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (chain,) = doc["wait_chains"]  # one wait line: the longest wait, the others its links
    assert [link["pe"] for link in chain["links"]] == [3, 2, 1]
    assert chain["links"][0]["send_loc"]["line"] == send
    assert chain["root"]["kind"] == "work" and chain["root"]["pe"] == 0
    assert chain["stall"] == chain["links"][0]["stall"]


def test_a_receive_that_never_got_its_message_stops_the_chain(tmp_path):
    path = tmp_path / "ring.kbt"
    with pytest.raises(DeadlockError):
        run_relay(path, kernel=ring_waits_first)
    replay = Replay.open(path, cache=False)
    analysis = Analysis(replay)
    for pe in range(PES):
        chain = analysis.wait_chain(wait_event(replay, pe))
        assert chain.links == () and chain.root.kind == UNMATCHED and chain.root.pe == pe
        assert chain.root.loc.line == line_of(ring_waits_first, "wait")
    assert analysis.worst_wait_chains == []


def test_report_shows_a_story_once_though_its_waits_are_on_two_lines(tmp_path):
    path = tmp_path / "ring.kbt"
    run_relay(path, kernel=ring_relay)
    replay = Replay.open(path, cache=False)
    analysis = Analysis(replay)
    # PE 0's first wait goes round the ring once; PE 1's second wait goes through it
    # (a chain on the other line that tells the same story again), PE 3's first is in it.
    (chain,) = analysis.worst_wait_chains
    assert [link.pe for link in chain.links] == [0, 3, 2, 1]
    assert chain.links[0].wait_loc.line == line_of(ring_relay, "back")
    assert chain.links[1].wait_loc.line == line_of(ring_relay, "wait")
    # Every PE filled its tile at the same time: PE 0's send left as PE 1 began waiting.
    assert chain.root.kind == TRANSIT and chain.root.pe == 0
    second = [c for c in map(analysis.wait_chain, _waits(replay, pe=1)) if c.links][1]
    assert chain.links[0].wait_event in {link.wait_event for link in second.links}


def _waits(replay: Replay, pe: int) -> list[int]:
    futs = replay.index.futures
    return [
        int(futs.wait_begin[f])
        for f in range(len(futs.cmd))
        if futs.pe[f] == pe and futs.wait_begin[f] >= 0
    ]
