"""The tuning database: format, packaged defaults, user file, and every way a file can be
unusable (one warning, then the next lookup level; never an exception)."""
import json
import os
import warnings

import pytest

from mpskern.tuning import db, lookup

INFO = dict(name="Apple M2 Pro", architecture="applegpu_g14s", family=8, is_simulator=False,
            max_threads_per_threadgroup=1024, max_threadgroup_memory=32768, simd_width=32)
GENERIC = {"variant": "tiled", "BM": 32, "BN": 32, "BK": 8, "WM": 1, "WN": 1}
TUNED = {"variant": "simd", "BM": 64, "BN": 32, "BK": 16, "WM": 2, "WN": 1}


@pytest.fixture(autouse=True)
def user_db(tmp_path, monkeypatch):
    path = tmp_path / "cache" / "tuning.json"
    monkeypatch.setenv(db.ENV_PATH, str(path))
    db.reset()
    yield path
    db.reset()


def tuned_entry(shape=(256, 256, 256), config=TUNED, **kw):
    return db.Entry(op="gemm", dtype="float32", config=dict(config), device=INFO["name"],
                    architecture=INFO["architecture"], family="apple8", backend="metal",
                    shape=tuple(shape), bucket=db.bucket_of(shape), time_ms=1.0,
                    default_time_ms=1.5, provenance={"source": "test", "measured": True}, **kw)


def test_user_path_and_override(monkeypatch, user_db):
    assert db.user_path() == str(user_db)
    monkeypatch.delenv(db.ENV_PATH)
    monkeypatch.delenv("MPSKERN_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere")
    if os.uname().sysname != "Darwin":
        assert db.user_path() == "/somewhere/mpskern/tuning.json"
    monkeypatch.setenv("MPSKERN_CACHE_DIR", "/cache")
    assert db.user_path() == "/cache/tuning.json"


def test_bucket_rounds_each_dim_up_to_a_power_of_two():
    assert db.bucket_of((1000, 1024, 1025)) == "1024x1024x2048"
    assert db.bucket_of((1, 0, 3)) == "1x1x4"
    assert db.bucket_of({"M": 5, "N": 9}) == "8x16"


def test_packaged_defaults_load_with_provenance():
    for fam in (7, 8, 9, 10):
        d = db.family_defaults(fam)
        assert d.problem is None and not d.bad_entries, (fam, d.problem, d.bad_entries)
        assert d.for_op("gemm", "float32") and d.for_op("gemm", "float16")
        for e in d.entries:
            assert e.provenance.get("source"), e
            assert e.provenance.get("measured") is False     # public heuristics for now
    assert len(db.family_defaults(None)) == 0
    assert len(db.family_defaults(42)) == 0                  # unknown family: no file, no fuss


def test_save_round_trip_and_replace(user_db):
    db.save([tuned_entry()])
    db.save([tuned_entry((512, 512, 512))])
    db.save([tuned_entry(config=GENERIC)])                   # same key: replaces the first
    doc = json.loads(user_db.read_text())
    assert doc["format"] == db.FORMAT and doc["version"] == db.VERSION
    assert len(doc["entries"]) == 2
    got = db.user_db()
    assert got.problem is None and len(got) == 2
    e = [e for e in got.entries if e.shape == (256, 256, 256)][0]
    assert e.config == GENERIC and e.bucket == "256x256x256" and e.backend == "metal"


def test_user_db_is_reread_when_the_file_changes(user_db):
    assert len(db.user_db()) == 0
    db.save([tuned_entry()])
    assert len(db.user_db()) == 1


BAD_FILES = {
    "empty": "",
    "corrupt": '{"format": "mpskern-tuning-db", "version": 1, "entries": [',
    "wrong format": '{"hello": 1}',
    "wrong version": json.dumps({"format": db.FORMAT, "version": 99, "entries": []}),
    "entries not a list": json.dumps({"format": db.FORMAT, "version": 1, "entries": {}}),
}


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_bad_user_file_warns_once_and_falls_back(kind, user_db):
    user_db.parent.mkdir(parents=True)
    user_db.write_text(BAD_FILES[kind])
    with pytest.warns(db.TuningDatabaseWarning, match=str(user_db)) as rec:
        c1 = lookup.choose("gemm", "float32", (64, 64, 64), INFO, generic=GENERIC)
        c2 = lookup.choose("gemm", "float32", (64, 64, 64), INFO, generic=GENERIC)
    assert len([w for w in rec if issubclass(w.category, db.TuningDatabaseWarning)]) == 1
    assert c1.level == c2.level == "family"          # apple8's packaged default
    assert c1.config == db.family_defaults(8).for_op("gemm", "float32")[0].config
    if kind == "wrong version":
        assert "newer" in str(rec[0].message)


def test_bad_user_file_is_moved_aside_on_save(user_db):
    user_db.parent.mkdir(parents=True)
    user_db.write_text("not json")
    with pytest.warns(db.TuningDatabaseWarning, match="moved"):
        db.save([tuned_entry()])
    assert len(db.read(str(user_db))) == 1
    assert [p.name for p in user_db.parent.iterdir() if ".bad-" in p.name]


def test_malformed_entries_are_skipped_with_one_warning(user_db):
    good = tuned_entry().to_json()
    user_db.parent.mkdir(parents=True)
    user_db.write_text(json.dumps({"format": db.FORMAT, "version": 1,
                                   "entries": [good, {"op": "gemm"}, 7]}))
    with pytest.warns(db.TuningDatabaseWarning, match="2 malformed entries"):
        c = lookup.choose("gemm", "float32", (256, 256, 256), INFO, generic=GENERIC)
    assert c.level == "exact" and c.config == TUNED


def test_unreadable_packaged_defaults_fall_back_to_generic(monkeypatch, tmp_path):
    (tmp_path / "apple8.json").write_text("{")
    monkeypatch.setattr(db, "DEFAULTS_DIR", str(tmp_path))
    with pytest.warns(db.TuningDatabaseWarning, match="packaged tuning defaults"):
        c = lookup.choose("gemm", "float32", (64, 64, 64), INFO, generic=GENERIC)
    assert c.level == "generic" and c.config == GENERIC


def test_merge_a_shared_file(tmp_path, user_db):
    shared = tmp_path / "colleague.json"
    shared.write_text(db.dump([tuned_entry(), tuned_entry((128, 128, 128))]))
    assert db.merge(str(shared)) == 2
    assert len(db.user_db()) == 2
    (tmp_path / "junk.json").write_text("[]")
    with pytest.raises(ValueError, match="cannot merge"):
        db.merge(str(tmp_path / "junk.json"))


def test_merge_names_malformed_entries(tmp_path, user_db):
    """Was: a file of only malformed entries said 'merged 0' and nothing else."""
    good = json.loads(db.dump([tuned_entry()]))
    bad = dict(good["entries"][0], config="not a dict")
    only_bad = tmp_path / "bad.json"
    only_bad.write_text(json.dumps(dict(good, entries=[bad, bad])))
    with pytest.raises(ValueError, match="none of its 2 entries is usable"):
        db.merge(str(only_bad))
    assert len(db.user_db()) == 0
    mixed = tmp_path / "mixed.json"
    mixed.write_text(json.dumps(dict(good, entries=[good["entries"][0], bad])))
    with pytest.warns(db.TuningDatabaseWarning, match="ignoring 1 malformed entry"):
        assert db.merge(str(mixed)) == 1
    assert len(db.user_db()) == 1


def test_missing_user_file_is_silent(user_db):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = lookup.choose("gemm", "float32", (64, 64, 64), INFO, generic=GENERIC)
    assert c.level == "family"


def test_packaged_defaults_fit_the_spaces_on_their_family():
    """Every packaged entry names a declared space and is valid within Apple GPU limits
    (32 KiB threadgroup memory, 1024 threads, SIMD width 32)."""
    from mpskern.tuning import spaces
    limits = dict(max_threads_per_threadgroup=1024, max_threadgroup_memory=32768, simd_width=32)
    for fam in (7, 8, 9, 10):
        for e in db.family_defaults(fam).entries:
            assert e.op in spaces.SPACES, (fam, e.op)
            assert spaces.problems(e.op, e.config, dict(limits, family=fam)) == [], (fam, e)


def test_concurrent_writers_keep_every_entry(user_db):
    """Writers in parallel processes merge under a lock: no entry is lost."""
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=db.save, args=([tuned_entry((64 + i, 64, 64))], str(user_db)))
             for i in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert all(p.exitcode == 0 for p in procs)
    assert len(db.read(str(user_db))) == 6


def test_a_directory_is_not_a_database(tmp_path):
    d = tmp_path / "dir"
    d.mkdir()
    assert db.read(str(d)).problem.startswith("unreadable")
    with pytest.raises(ValueError, match="is a directory"):
        db.save([tuned_entry()], str(d))
    assert d.is_dir()
