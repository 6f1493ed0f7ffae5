"""The compiled profile cache: a profile parsed once is unpickled by later processes, and a
changed, corrupt or disabled cache falls back to the JSON."""

from __future__ import annotations

import json
import math
import os
import pickle
from pathlib import Path

import pytest

from distir.analysis import hardware
from distir.analysis.hardware import Hardware, load_hardware
from distir.errors import ConfigError


@pytest.fixture
def profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    src = load_hardware("h100-sxm")
    p = tmp_path / "prof" / "mine.json"
    p.parent.mkdir()
    p.write_text(json.dumps(src.to_json()), encoding="utf-8")
    monkeypatch.setenv("DISTIR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(hardware, "_CACHE", {})
    return p


def _pickles(tmp_path: Path) -> list[Path]:
    d = tmp_path / "cache"
    return sorted(d.glob("*.pickle")) if d.is_dir() else []


def test_second_process_reads_the_pickle(profile: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    hw = load_hardware(profile)
    assert len(_pickles(tmp_path)) == 1
    monkeypatch.setattr(hardware, "_CACHE", {})  # a fresh process
    calls: list[int] = []
    real = Hardware.from_json
    monkeypatch.setattr(Hardware, "from_json",
                        staticmethod(lambda *a, **k: calls.append(1) or real(*a, **k)))
    again = load_hardware(profile)
    assert calls == []
    assert again == hw and again is not hw
    assert again.fit("matmul", "Float16") == hw.fit("matmul", "Float16")
    assert again.matmul_time(512, 512, 512, "Float16", 2) == hw.matmul_time(
        512, 512, 512, "Float16", 2)


def test_a_changed_profile_is_parsed_again(profile: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    load_hardware(profile)
    data = json.loads(profile.read_text(encoding="utf-8"))
    data["device"]["launch_overhead"] = 1e-3
    profile.write_text(json.dumps(data), encoding="utf-8")
    st = profile.stat()
    os.utime(profile, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    monkeypatch.setattr(hardware, "_CACHE", {})
    assert load_hardware(profile).launch_overhead == 1e-3
    assert len(_pickles(tmp_path)) == 2


def test_a_corrupt_pickle_falls_back_to_the_json(profile: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    hw = load_hardware(profile)
    (pk,) = _pickles(tmp_path)
    pk.write_bytes(b"not a pickle")
    monkeypatch.setattr(hardware, "_CACHE", {})
    assert load_hardware(profile) == hw


def test_an_empty_cache_dir_disables_the_cache(profile: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISTIR_CACHE_DIR", "")
    assert hardware.cache_dir() is None
    load_hardware(profile)
    assert _pickles(tmp_path) == []


def test_an_unwritable_cache_is_skipped(profile: Path, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    monkeypatch.setenv("DISTIR_CACHE_DIR", str(blocker / "sub"))  # a folder under a file
    assert load_hardware(profile).name == load_hardware("h100-sxm").name


def test_a_cached_profile_costs_what_the_parsed_one_does(profile: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = load_hardware(profile)
    monkeypatch.setattr(hardware, "_CACHE", {})
    cached = load_hardware(profile)
    assert cached is not parsed and cached == parsed
    for (fam, key, a), (fam2, key2, b) in zip(parsed.fits, cached.fits, strict=True):
        assert (fam, key) == (fam2, key2) and a == b
        for scale in (1.0, 37.0, 1e3, 1e6, 1e9):
            x = {f: scale * (i + 1) for i, f in enumerate(sorted({*a.features,
                                                                  *a.tree_features}))}
            assert a(x) == b(x)  # bit-identical, not approximately equal
    assert cached.to_json() == parsed.to_json()


def test_a_cached_profile_decodes_only_the_fits_it_uses(profile: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    load_hardware(profile)
    monkeypatch.setattr(hardware, "_CACHE", {})
    hw = load_hardware(profile)
    boosted = {(fam, key): m for fam, key, m in hw.fits if m.kind == "boosted"}
    assert len(boosted) > 10
    assert not any(m.trees.decoded for m in boosted.values())
    hw.matmul_time(512, 512, 512, "Float16", 2)
    used = {k for k, m in boosted.items() if m.trees.decoded}
    assert used == {("matmul", "Float16")}


def test_trees_are_their_node_tuples() -> None:
    nodes = (((0, 1.5, 1, 2, 0.0), (-1, 0.0, 0, 0, -0.25), (-1, 0.0, 0, 0, 0.5)),
             ((-1, 0.0, 0, 0, 0.125),))
    t = hardware.Trees(nodes)
    assert len(t) == 2 and t[1] == nodes[1] and t[-1] == nodes[1] and t[:1] == nodes[:1]
    assert tuple(t) == nodes and t == nodes and hash(t) == hash(nodes)
    assert t == hardware.Trees([list(map(list, tree)) for tree in nodes])
    again = pickle.loads(pickle.dumps(t))
    assert again == t and not again.decoded
    assert t.to_json() == [[list(n) for n in tree] for tree in nodes]
    m = hardware.FitModel("boosted", ("m",), coef=(1e-9,), tree_features=("m",),
                          trees=nodes)
    assert m.trees == t
    assert m({"m": 2.0}) == 2e-9 * math.exp(-0.25 + 0.125)  # log 2 <= 1.5: left leaf
    assert m({"m": 10.0}) == 1e-8 * math.exp(0.5 + 0.125)
    with pytest.raises(ConfigError, match="malformed tree node"):
        hardware.FitModel("boosted", ("m",), coef=(1.0,), tree_features=("m",),
                          trees=(((0, 1.0, 1, 5, 0.0), (-1, 0.0, 0, 0, 0.0)),))
    with pytest.raises(ConfigError, match="malformed trees"):
        hardware.FitModel("boosted", ("m",), coef=(1.0,), tree_features=("m",),
                          trees=(((0, 1.0, 1),),))


def test_old_entries_of_a_profile_are_pruned(profile: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Each version of a profile makes an entry; only the newest ``KEEP_COMPILED`` of one
    profile name stay, and other profiles' entries are untouched."""
    cache = tmp_path / "cache"
    cache.mkdir()
    olds = []
    for i in range(hardware.KEEP_COMPILED + 3):
        p = cache / f"profile-mine-{i:032x}.pickle"
        p.write_bytes(b"stale")
        os.utime(p, ns=(10**9 * (i + 1), 10**9 * (i + 1)))  # long ago, oldest first
        olds.append(p)
    other = cache / f"profile-other-{0:032x}.pickle"
    other.write_bytes(b"x")
    os.utime(other, ns=(10**9, 10**9))
    load_hardware(profile)
    left = sorted(cache.glob("profile-mine-*.pickle"))
    assert len(left) == hardware.KEEP_COMPILED
    assert olds[-1] in left and olds[0] not in left  # the newest stale ones stay
    assert len([p for p in left if p not in olds]) == 1  # with the new entry
    assert other.exists()
