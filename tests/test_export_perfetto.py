"""Perfetto protobuf export: the file parses back with perfetto's own classes and holds every
future, every issue-to-wait flow and every stall, each track's events in order."""

from __future__ import annotations

import sys
from collections import Counter, defaultdict

import numpy as np
import pytest

from emulator import HardwareConfig
from emulator.scenarios import decode_prefetch, ring_attention
from emulator.trace.schema import Kind
from kbdebug.cli import main
from kbdebug.export.perfetto import INSTALL_HINT, write_perfetto
from kbdebug.replay import Replay
from kbdebug.replay.values import Values

pb = pytest.importorskip(
    "perfetto.protos.perfetto.trace.perfetto_trace_pb2", reason="needs the perfetto extra"
)
TE = pb.TrackEvent


def parsed(replay: Replay, path) -> list:
    write_perfetto(replay, path)
    return list(pb.Trace.FromString(path.read_bytes()).packet)


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    """ring_attention on 4 PEs, links slow enough that some receives stall and some do not."""
    root = tmp_path_factory.mktemp("ring")
    ring_attention(config=HardwareConfig(ipcq_bytes_per_cycle=8)).run(trace=root / "r.kbt")
    replay = Replay.open(root / "r.kbt")
    return replay, parsed(replay, root / "r.pftrace"), root


@pytest.fixture(scope="module")
def prefetch(tmp_path_factory):
    root = tmp_path_factory.mktemp("prefetch")
    decode_prefetch(n_tiles=6).run(trace=root / "p.kbt")
    replay = Replay.open(root / "p.kbt")
    return replay, parsed(replay, root / "p.pftrace")


def events(packets) -> list:
    return [p for p in packets if p.HasField("track_event")]


def annotations(event) -> dict[int, object]:
    """name iid -> value of an event's debug annotations."""
    out = {}
    for a in event.debug_annotations:
        kind = a.WhichOneof("value")
        out[a.name_iid] = getattr(a, kind) if kind else None
    return out


def interned(packets):
    data = next(p.interned_data for p in packets if p.HasField("interned_data"))
    names = {n.iid: n.name for n in data.event_names}
    annotation = {n.name: n.iid for n in data.debug_annotation_names}
    sources = {s.iid: s for s in data.source_locations}
    return names, annotation, sources


@pytest.mark.parametrize("which", ["ring", "prefetch"])
def test_every_future_is_one_slice_with_its_id(which, request):
    replay, packets = request.getfixturevalue(which)[:2]
    names, annotation, _ = interned(packets)
    f = replay.index.futures
    futures = [
        annotations(e.track_event)[annotation["future"]]
        for e in events(packets)
        if e.track_event.type == TE.TYPE_SLICE_BEGIN
        and names[e.track_event.name_iid].endswith(" future")
    ]
    assert sorted(futures) == np.flatnonzero(f.cmd >= 0).tolist()


@pytest.mark.parametrize("which", ["ring", "prefetch"])
def test_every_waited_future_flows_from_its_issue_to_its_wait(which, request):
    replay, packets = request.getfixturevalue(which)[:2]
    _, annotation, _ = interned(packets)
    c, f = replay.index.columns, replay.index.futures
    waited = np.flatnonzero((f.cmd >= 0) & (f.wait_begin >= 0))
    assert len(waited)
    starts: dict[int, list] = defaultdict(list)
    ends: dict[int, list] = {}
    for p in events(packets):
        e = p.track_event
        for flow in e.flow_ids:
            starts[flow].append((p.timestamp, e.track_uuid))
        for flow in e.terminating_flow_ids:
            assert flow not in ends
            ends[flow] = (p.timestamp, e.track_uuid, annotations(e)[annotation["future"]])
    assert sorted(ends) == sorted(int(fid) + 1 for fid in waited)
    for fid in waited.tolist():
        ts, track, future = ends[fid + 1]
        assert future == fid
        assert ts == c.time[f.wait_begin[fid]]  # 1000 MHz: one cycle is one ns
        # It starts at the future's issue, and passes its transfer when it had one.
        path = sorted(starts[fid + 1])
        assert path[0][0] == c.time[f.issue[fid]]
        assert len(path) == 1 + (f.grant[fid] >= 0)
        assert all(t <= ts for t, _ in path)


def test_stalls_are_slices_on_the_kernel_track_with_their_cycles_and_line(ring):
    replay, packets, _ = ring
    names, annotation, sources = interned(packets)
    c = replay.index.columns
    ends = np.flatnonzero((c.kind == Kind.WAIT_END) & (c.val > 0))
    stalls = []
    for p in events(packets):
        e = p.track_event
        if e.type == TE.TYPE_SLICE_BEGIN and names[e.name_iid].startswith("stall "):
            stalls.append(annotations(e)[annotation["stalled_cycles"]])
            loc = sources[e.source_location_iid]
            assert names[e.name_iid].endswith(f":{loc.line_number}")
    assert sorted(stalls) == sorted(c.val[ends].tolist())
    assert len(stalls) > 0


def test_each_track_is_in_time_order_and_its_slices_nest(ring):
    _, packets, _ = ring
    by_track: dict[int, list] = defaultdict(list)
    for p in events(packets):
        by_track[p.track_event.track_uuid].append((p.timestamp, p.track_event.type))
    assert len(by_track) > 4
    for track, evs in by_track.items():
        times = [t for t, _ in evs]
        assert times == sorted(times), track
        depth = 0
        for _, kind in evs:
            depth += {TE.TYPE_SLICE_BEGIN: 1, TE.TYPE_SLICE_END: -1}.get(kind, 0)
            assert depth >= 0, track
        assert depth == 0, track


def test_tracks_are_described_once_under_their_pe_and_names_are_interned(ring):
    replay, packets, _ = ring
    names, _, sources = interned(packets)
    tracks = [p.track_descriptor for p in packets if p.HasField("track_descriptor")]
    uuids = Counter(t.uuid for t in tracks)
    assert max(uuids.values()) == 1
    processes = {t.uuid: t.process.pid for t in tracks if t.HasField("process")}
    assert sorted(processes.values()) == [pe + 1 for pe in range(replay.index.n_pes)]
    children = [t for t in tracks if t.parent_uuid]
    assert {t.parent_uuid for t in children} == set(processes)
    channel_names = {t.name for t in children}
    assert {"kernel ring_attention", "scratch", "futures"} <= channel_names
    used = {p.track_event.track_uuid for p in events(packets)}
    assert used <= set(uuids)
    for p in events(packets):
        e = p.track_event
        if e.name_iid:
            assert e.name_iid in names
        if e.source_location_iid:
            assert e.source_location_iid in sources
    counters = [p for p in events(packets) if p.track_event.type == TE.TYPE_COUNTER]
    c = replay.index.columns
    scratch = np.isin(c.kind, [Kind.SCRATCH_ALLOC, Kind.SCRATCH_FREE])
    assert sorted(p.track_event.counter_value for p in counters) == sorted(c.val[scratch].tolist())


def test_the_command_writes_pftrace_by_suffix_and_refuses_a_foreign_file(ring, capsys):
    _, _, root = ring
    out = root / "cli.pftrace"
    assert main(["export", str(root / "r.kbt"), "-o", str(out)]) == 0
    assert "futures" in capsys.readouterr().out
    assert pb.Trace.FromString(out.read_bytes()).packet
    assert main(["export", str(root / "r.kbt"), "-o", str(out)]) == 0  # ours: replaced
    foreign = root / "foreign.pftrace"
    foreign.write_bytes(b"not ours")
    assert main(["export", str(root / "r.kbt"), "-o", str(foreign)]) == 2
    assert "not a kbdebug export" in capsys.readouterr().err
    assert foreign.read_bytes() == b"not ours"


def test_without_the_extra_the_export_says_what_to_install(ring, capsys, monkeypatch):
    _, _, root = ring
    # A None in sys.modules makes the import fail as if the package were not installed.
    monkeypatch.setitem(sys.modules, "perfetto.protos.perfetto.trace", None)
    out = root / "missing.pftrace"
    assert main(["export", str(root / "r.kbt"), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and INSTALL_HINT in err[0]
    assert not out.exists()


def test_a_truncated_trace_closes_every_slice_at_its_end_and_keeps_tracks_in_order(ring):
    replay, _, root = ring
    data = (root / "r.kbt").read_bytes()
    cut = root / "cut.kbt"
    cut.write_bytes(data[: len(data) * 2 // 3])
    truncated = Replay.open(cut, cache=False)
    assert truncated.status == "truncated"
    packets = parsed(truncated, root / "cut.pftrace")
    names, annotation, _ = interned(packets)
    by_track: dict[int, list] = defaultdict(list)
    unfinished = 0
    for p in events(packets):
        e = p.track_event
        by_track[e.track_uuid].append((p.timestamp, e.type))
        unfinished += annotation["unfinished"] in annotations(e)
        assert p.timestamp <= truncated.end_time  # 1000 MHz: one cycle is one ns
    assert unfinished > 0
    for evs in by_track.values():
        assert [t for t, _ in evs] == sorted(t for t, _ in evs)
        kinds = [k for _, k in evs]
        assert kinds.count(TE.TYPE_SLICE_BEGIN) == kinds.count(TE.TYPE_SLICE_END)


def test_a_future_slice_names_the_tensor_slice_it_moves(prefetch):
    replay, packets = prefetch
    names, annotation, _ = interned(packets)
    k = replay.index.commands
    tensors = Values.of(replay).tensors
    assert len(tensors)
    seen = {}
    for p in events(packets):
        e = p.track_event
        if e.type == TE.TYPE_SLICE_BEGIN and names[e.name_iid].endswith(" future"):
            args = annotations(e)
            seen[args[annotation["future"]]] = args.get(annotation["tensor"])
    expected = {}
    for fid in seen:
        cmd = int(replay.index.futures.cmd[fid])
        found = tensors.slice_of(int(k.addr[cmd]), int(k.nbytes[cmd]))
        expected[fid] = None if found is None else str(found)
    assert seen == expected
    assert any(s is not None and "[" in s for s in seen.values())
