"""Lookup order (forced, exact, bucket, family, generic) over a fake configuration space
whose validity depends on the device's limits, as the real spaces do."""
import pytest

from mpskern.tuning import db, lookup

M2 = dict(name="Apple M2 Pro", architecture="applegpu_g14s", family=8, is_simulator=False,
          max_threads_per_threadgroup=1024, max_threadgroup_memory=32768, simd_width=32)
SIM8 = dict(M2, name="mpskern simulator (apple8)", architecture="", is_simulator=True)
GENERIC = {"variant": "tiled", "BM": 32, "BN": 32, "BK": 8, "WM": 1, "WN": 1}
BIG = {"variant": "simd", "BM": 64, "BN": 64, "BK": 32, "WM": 2, "WN": 2}
SMALL = {"variant": "simd", "BM": 32, "BN": 64, "BK": 16, "WM": 1, "WN": 2}


def valid_for(info, shape=None):
    """A fake space's rules: threads and threadgroup memory within the device's limits."""
    def valid(c):
        if set(c) != set(GENERIC):
            return f"keys {sorted(c)} are not this space's {sorted(GENERIC)}"
        threads = 32 * c["WM"] * c["WN"]
        smem = 4 * (c["BM"] * c["BK"] + c["BK"] * c["BN"])
        if threads > info["max_threads_per_threadgroup"]:
            return f"{threads} threads > {info['max_threads_per_threadgroup']}"
        if smem > info["max_threadgroup_memory"]:
            return f"{smem} B threadgroup memory > {info['max_threadgroup_memory']}"
        return None
    return valid


def entry(shape, config, info=M2, **kw):
    d = dict(op="gemm", dtype="float32", config=dict(config), device=info["name"],
             architecture=info["architecture"], family=db.family_name(info["family"]),
             backend=db.backend_of(info), shape=tuple(shape), bucket=db.bucket_of(shape),
             time_ms=1.0, default_time_ms=2.0, provenance={"measured": True})
    d.update(kw)
    return db.Entry(**d)


def choose(shape, udb, info=M2, generic=GENERIC, op="gemm", dtype="float32"):
    return lookup.choose(op, dtype, shape, info, generic=generic, valid=valid_for(info),
                         user_db=udb)


@pytest.fixture(autouse=True)
def fresh():
    db.reset()
    yield
    db.reset()


def test_levels_in_order():
    udb = db.Database("u.json", [entry((1000, 1000, 1000), BIG), entry((2048, 2048, 2048), SMALL)])
    c = choose((1000, 1000, 1000), udb)
    assert (c.level, c.config) == ("exact", BIG)
    c = choose((1020, 1000, 1000), udb)                # same bucket 1024^3
    assert (c.level, c.config) == ("bucket", BIG)
    c = choose((100, 100, 100), udb)                   # no user entry: packaged apple8
    assert c.level == "family" and c.entry.provenance["measured"] is False
    assert "not measured by mpskern" in c.explain()
    c = choose((100, 100, 100), db.Database("u.json"), info=dict(M2, family=0))
    assert (c.level, c.config) == ("generic", GENERIC)
    assert lookup.last_choice() is c


def test_bucket_prefers_the_nearest_tuned_shape():
    udb = db.Database("u.json", [entry((513, 513, 513), SMALL), entry((1000, 1000, 1000), BIG)])
    assert choose((990, 990, 990), udb).config == BIG
    assert choose((530, 530, 530), udb).config == SMALL


def test_entries_of_other_devices_and_of_the_simulator_do_not_match():
    other = entry((64, 64, 64), BIG, device="Apple M1", architecture="applegpu_g13g", family="apple7")
    sim = entry((64, 64, 64), SMALL, info=SIM8)
    udb = db.Database("u.json", [other, sim])
    assert choose((64, 64, 64), udb).level == "family"
    c = choose((64, 64, 64), udb, info=SIM8)
    assert (c.level, c.config) == ("exact", SMALL)


def test_same_architecture_matches_when_the_name_differs():
    e = entry((64, 64, 64), BIG, device="Apple M2 Max")
    c = choose((64, 64, 64), db.Database("u.json", [e]))
    assert (c.level, c.config) == ("exact", BIG)


def test_stale_entry_warns_once_and_falls_back():
    stale = entry((64, 64, 64), {"TILE": 16})               # a space that no longer exists
    udb = db.Database("u.json", [stale])
    with pytest.warns(db.TuningDatabaseWarning, match="cannot be used here") as rec:
        c1 = choose((64, 64, 64), udb)
        c2 = choose((64, 64, 64), udb)
    assert len(rec) == 1
    assert c1.level == c2.level == "family"
    assert c1.rejected and c1.rejected[0][0] == "exact"


def test_limits_decide_validity_so_a_small_device_skips_the_family_default():
    tiny = dict(SIM8, max_threadgroup_memory=4096, max_threads_per_threadgroup=64)
    c = choose((64, 64, 64), db.Database("u.json"), info=tiny)
    assert c.level == "generic" and c.config == GENERIC
    assert c.rejected and c.rejected[0][0] == "family" and "threads >" in c.rejected[0][3]
    with pytest.raises(ValueError, match="generic"):      # the caller's own default must fit
        choose((64, 64, 64), db.Database("u.json"), info=dict(tiny, max_threads_per_threadgroup=16))


def test_forced_wins_and_is_validated():
    udb = db.Database("u.json", [entry((64, 64, 64), BIG)])
    with lookup.forced("gemm", SMALL):
        assert choose((64, 64, 64), udb).level == "forced"
        assert choose((64, 64, 64), udb, op="conv2d").level != "forced"   # other ops unaffected
    assert choose((64, 64, 64), udb).level == "exact"
    with lookup.forced("gemm", {"variant": "simd", "BM": 64, "BN": 64, "BK": 64, "WM": 2, "WN": 2}):
        tiny = dict(M2, max_threadgroup_memory=16384)
        with pytest.raises(ValueError, match="pinned"):
            choose((64, 64, 64), udb, info=tiny)


def test_dtype_forms():
    import numpy as np
    assert lookup.dtype_name(np.float16) == "float16"
    assert lookup.dtype_name("float32") == "float32"
    assert lookup.dtype_name(1) == "float16" and lookup.dtype_name(0) == "float32"


def test_explain_names_the_level_and_the_measurement():
    udb = db.Database("u.json", [entry((64, 64, 64), BIG)])
    s = choose((64, 64, 64), udb).explain()
    assert s.startswith("exact:") and "u.json" in s and "2.00x" in s


def test_packaged_bucket_entry_beats_the_family_wide_one(monkeypatch, tmp_path):
    wide = db.Entry(op="gemm", dtype="float32", config=dict(BIG), provenance={"source": "a"})
    small = db.Entry(op="gemm", dtype="float32", config=dict(SMALL), bucket="64x64x64",
                     provenance={"source": "b"})
    (tmp_path / "apple8.json").write_text(db.dump([wide, small]))
    monkeypatch.setattr(db, "DEFAULTS_DIR", str(tmp_path))
    c = choose((60, 64, 33), db.Database("u.json"))
    assert (c.level, c.config) == ("family", SMALL) and "from b" in c.explain()
    c = choose((600, 64, 33), db.Database("u.json"))
    assert (c.level, c.config) == ("family", BIG)


def test_many_stale_entries_give_one_warning():
    udb = db.Database("u.json", [entry((64, 64, 64), {"TILE": 16}),
                                 entry((128, 128, 128), {"TILE": 32})])
    with pytest.warns(db.TuningDatabaseWarning) as rec:
        choose((64, 64, 64), udb)
        choose((128, 128, 128), udb)
    assert len(rec) == 1
