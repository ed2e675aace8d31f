"""SqliteEmbeddingsDB: the EmbeddingsDB interface, exact cosine top-k, persistence, sharing."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from ovos_plugin_manager.embeddings import load_embeddings_db_plugin

from ovos_memory_plugins._core.paths import data_dir
from ovos_memory_plugins.errors import EmbeddingsError
from ovos_memory_plugins.vectordb import CollectionNotFound, SqliteEmbeddingsDB


@pytest.fixture
def db(tmp_path):
    with SqliteEmbeddingsDB({"path": str(tmp_path / "vec.db")}) as store:
        yield store


def unit(rng, n, dim=16):
    m = rng.standard_normal((n, dim)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def brute_force(matrix, keys, q, k):
    scores = matrix @ (q / np.linalg.norm(q))
    order = np.argsort(-scores, kind="stable")[:k]
    return [keys[i] for i in order], [1.0 - float(scores[i]) for i in order]


def test_opm_loads_the_plugin_by_its_entry_point_name():
    assert load_embeddings_db_plugin("ovos-memory-sqlite-embeddings-plugin") is SqliteEmbeddingsDB


def test_the_default_file_lives_under_the_xdg_data_dir_not_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with SqliteEmbeddingsDB() as store:
        store.add_embeddings("k", [1.0, 0.0])
        assert store.path == str(data_dir() / "embeddings.db")
    assert (data_dir() / "embeddings.db").exists()
    assert os.listdir(tmp_path) == []


def test_path_can_be_given_as_a_keyword_as_some_opm_callers_do(tmp_path):
    with SqliteEmbeddingsDB(path=str(tmp_path / "kw.db")) as store:
        store.add_embeddings("k", [1.0, 0.0])
    assert (tmp_path / "kw.db").exists()


def test_collections_are_created_listed_fetched_and_deleted(db):
    made = db.create_collection("notes", {"embedder": "e5"})
    assert made.name == "notes" and made.metadata == {"embedder": "e5"} and made.count == 0
    db.create_collection("notes")  # idempotent, keeps the metadata
    db.add_embeddings("a", [1.0, 2.0, 3.0], collection_name="notes")
    fetched = db.get_collection("notes")
    assert (fetched.dim, fetched.count, fetched.metadata) == (3, 1, {"embedder": "e5"})
    assert [c.name for c in db.list_collections()] == ["notes"]
    db.delete_collection("notes")
    assert db.list_collections() == []
    with pytest.raises(ValueError):
        db.get_collection("notes")
    with pytest.raises(CollectionNotFound):
        db.get_collection("notes")


def test_vectors_and_metadata_round_trip_exactly(db):
    vec = np.array([3.0, -4.0, 0.5], dtype=np.float32)
    returned = db.add_embeddings("k1", vec, {"content": "héllo 👋", "n": 2}, collection_name="c")
    assert np.array_equal(returned, vec)
    got, meta = db.get_embeddings("k1", collection_name="c", return_metadata=True)
    assert np.array_equal(got, vec) and got.dtype == np.float32  # stored as given, not normalised
    assert meta == {"content": "héllo 👋", "n": 2}
    assert db.get_embeddings("missing", collection_name="c") is None
    assert db.get_embeddings("missing", collection_name="c", return_metadata=True) == (None, None)


def test_get_batch_keeps_the_order_of_the_keys_and_marks_missing_ones(db):
    db.add_embeddings_batch(["a", "b"], [[1.0, 0.0], [0.0, 1.0]], [{"x": 1}, None])
    out = db.get_embeddings_batch(["b", "zz", "a"], return_metadata=True)
    assert [k for k, *_ in out] == ["b", "zz", "a"]
    assert out[1][1] is None and out[1][2] == {}
    assert out[2][2] == {"x": 1} and np.array_equal(out[0][1], [0.0, 1.0])


@pytest.mark.parametrize("use_blas", [False, True])
def test_query_is_exact_cosine_top_k_against_numpy_brute_force(tmp_path, use_blas):
    db = SqliteEmbeddingsDB({"path": str(tmp_path / "bf.db"), "use_blas": use_blas})
    rng = np.random.default_rng(7)
    matrix = unit(rng, 300) * rng.uniform(0.5, 3.0, (300, 1)).astype(np.float32)  # not unit: cosine must normalise
    keys = [f"k{i}" for i in range(300)]
    db.add_embeddings_batch(keys, list(matrix))
    normalised = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    for _ in range(5):
        q = rng.standard_normal(16).astype(np.float32)
        expected_keys, expected_dist = brute_force(normalised, keys, q, 7)
        got = db.query(q, top_k=7)
        assert [k for k, _ in got] == expected_keys
        assert np.allclose([d for _, d in got], expected_dist, atol=1e-5)
    db.close()


def test_query_returns_metadata_copies_on_request(db):
    db.add_embeddings("a", [1.0, 0.0], {"content": "x"})
    (key, distance, meta), = db.query([1.0, 0.0], top_k=3, return_metadata=True)
    assert key == "a" and distance == pytest.approx(0.0, abs=1e-6) and meta == {"content": "x"}
    meta["content"] = "tampered"
    assert db.query([1.0, 0.0], return_metadata=True)[0][2] == {"content": "x"}


def test_a_session_filter_never_under_fills_however_many_other_sessions_dominate(db):
    rng = np.random.default_rng(1)
    target = np.zeros(16, dtype=np.float32)
    target[0] = 1.0
    close = unit(rng, 200) * 0.05 + target  # session "a": all very close to the query
    far = unit(rng, 3)  # session "b": three random vectors
    db.add_embeddings_batch([f"a{i}" for i in range(200)], list(close), [{"session_id": "a"}] * 200)
    db.add_embeddings_batch(["b0", "b1", "b2"], list(far), [{"session_id": "b"}] * 3)
    assert {k for k, _ in db.query(target, top_k=5, where={"session_id": "b"})} == {"b0", "b1", "b2"}
    assert len(db.query(target, top_k=2, where={"session_id": "b"})) == 2
    assert db.query(target, top_k=5, where={"session_id": "nobody"}) == []
    assert all(k.startswith("a") for k, _ in db.query(target, top_k=5))


@pytest.mark.parametrize("session", ["big", "small"])  # a filter keeping most rows, and a selective one
def test_filtered_queries_match_numpy_brute_force_on_the_matching_rows(db, session):
    rng = np.random.default_rng(11)
    matrix = unit(rng, 400)
    owners = ["small" if i % 10 == 0 else "big" for i in range(400)]
    keys = [f"k{i}" for i in range(400)]
    db.add_embeddings_batch(keys, list(matrix), [{"session_id": o} for o in owners])
    rows = [i for i, o in enumerate(owners) if o == session]
    q = rng.standard_normal(16).astype(np.float32)
    expected_keys, expected_dist = brute_force(matrix[rows], [keys[i] for i in rows], q, 8)
    got = db.query(q, top_k=8, where={"session_id": session})
    assert [k for k, _ in got] == expected_keys
    assert np.allclose([d for _, d in got], expected_dist, atol=1e-5)


def test_a_filter_on_a_key_without_an_index_also_works(db):
    db.add_embeddings_batch(["x", "y"], [[1.0, 0.0], [0.9, 0.1]], [{"lang": "en"}, {"lang": "pt"}])
    assert [k for k, _ in db.query([1.0, 0.0], where={"lang": "pt"})] == ["y"]
    assert [k for k, _ in db.query([1.0, 0.0], where={"lang": "pt", "session_id": "s"})] == []


def test_adding_an_existing_key_replaces_its_vector_and_metadata(db):
    db.add_embeddings("a", [1.0, 0.0], {"v": 1})
    db.add_embeddings("b", [0.0, 1.0])
    db.add_embeddings("a", [0.0, -1.0], {"v": 2})
    assert db.count_embeddings_in_collection() == 2
    assert db.query([0.0, -1.0], top_k=1, return_metadata=True)[0] == ("a", pytest.approx(0.0, abs=1e-6), {"v": 2})


def test_deleting_removes_from_queries_and_counts_and_ignores_missing_keys(db):
    db.add_embeddings_batch(["a", "b", "c"], [[1.0, 0.0], [0.8, 0.2], [0.0, 1.0]])
    db.delete_embeddings("a")
    db.delete_embeddings_batch(["c", "never-there"])
    assert db.count_embeddings_in_collection() == 1
    assert db.query([1.0, 0.0], top_k=5) == [("b", pytest.approx(1 - 0.8 / np.hypot(0.8, 0.2), abs=1e-6))]


def test_random_interleaved_writes_and_deletes_keep_the_ram_matrix_exact(db):
    rng = np.random.default_rng(3)
    truth: dict[str, np.ndarray] = {}
    for step in range(40):
        keys = [f"k{int(i)}" for i in rng.integers(0, 60, 5)]
        if step % 3 == 2:
            db.delete_embeddings_batch(keys)
            for k in keys:
                truth.pop(k, None)
        else:
            vectors = unit(rng, 5)
            db.add_embeddings_batch(keys, list(vectors))
            truth.update(zip(keys, vectors))  # the last duplicate wins, as in the DB
    keys = sorted(truth)
    q = rng.standard_normal(16).astype(np.float32)
    expected, _ = brute_force(np.stack([truth[k] for k in keys]), keys, q, 10)
    assert [k for k, _ in db.query(q, top_k=10)] == expected
    assert db.count_embeddings_in_collection() == len(truth)


def test_a_reopened_file_holds_everything(tmp_path):
    path = str(tmp_path / "reopen.db")
    with SqliteEmbeddingsDB({"path": path}) as first:
        first.add_embeddings_batch(["a", "b"], [[1.0, 0.0], [0.0, 1.0]], [{"session_id": "s"}, None],
                                   collection_name="c")
        first.delete_embeddings("b", collection_name="c")
        first.add_embeddings("d", [0.6, 0.8], collection_name="c")
    with SqliteEmbeddingsDB({"path": path}) as second:
        assert [k for k, _ in second.query([1.0, 0.0], collection_name="c")] == ["a", "d"]
        assert second.query([1.0, 0.0], collection_name="c", return_metadata=True)[0][2] == {"session_id": "s"}


def test_two_instances_on_one_file_see_each_others_writes(tmp_path):
    path = str(tmp_path / "shared.db")
    with SqliteEmbeddingsDB({"path": path}) as a, SqliteEmbeddingsDB({"path": path}) as b:
        a.add_embeddings("x", [1.0, 0.0])
        assert [k for k, _ in b.query([1.0, 0.0])] == ["x"]
        b.add_embeddings("y", [0.0, 1.0])
        a.delete_embeddings("x")
        assert [k for k, _ in b.query([1.0, 0.0])] == ["y"]
        assert [k for k, _ in a.query([1.0, 0.0])] == ["y"]


def test_a_collection_deleted_and_recreated_elsewhere_is_not_mistaken_for_the_old_one(tmp_path):
    path = str(tmp_path / "recreate.db")
    with SqliteEmbeddingsDB({"path": path}) as a, SqliteEmbeddingsDB({"path": path}) as b:
        a.add_embeddings("old", [1.0, 0.0])
        assert b.query([1.0, 0.0])[0][0] == "old"
        a.delete_collection("ovos_embeddings")
        a.add_embeddings("new", [1.0, 0.0])
        assert [k for k, _ in b.query([1.0, 0.0])] == ["new"]


_OTHER_PROCESS = textwrap.dedent("""
    import sys
    from ovos_memory_plugins.vectordb import SqliteEmbeddingsDB
    db = SqliteEmbeddingsDB({"path": sys.argv[1]})
    if sys.argv[2] == "append":
        db.add_embeddings_batch(["p1", "p2"], [[0.0, 1.0], [0.1, 1.0]], [{"session_id": "p"}] * 2)
    else:
        db.delete_embeddings("p1")
    db.close()
""")


@pytest.mark.heavy
def test_writes_by_another_process_are_seen_without_reopening(tmp_path):
    path = str(tmp_path / "procs.db")
    with SqliteEmbeddingsDB({"path": path}) as db:
        db.add_embeddings("mine", [1.0, 0.0])
        assert [k for k, _ in db.query([0.0, 1.0])] == ["mine"]  # mirror loaded
        subprocess.run([sys.executable, "-c", _OTHER_PROCESS, path, "append"], check=True)
        assert [k for k, _ in db.query([0.0, 1.0])] == ["p1", "p2", "mine"]  # appended rows picked up
        subprocess.run([sys.executable, "-c", _OTHER_PROCESS, path, "delete"], check=True)
        assert [k for k, _ in db.query([0.0, 1.0])] == ["p2", "mine"]  # a delete forces a reload
        assert [k for k, _ in db.query([0.0, 1.0], where={"session_id": "p"})] == ["p2"]


def test_memory_path_keeps_everything_in_ram(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with SqliteEmbeddingsDB({"path": ":memory:"}) as store:
        store.add_embeddings("a", [1.0, 0.0])
        assert store.query([1.0, 0.0])[0][0] == "a"
    assert os.listdir(tmp_path) == []
    assert not (data_dir() / "embeddings.db").exists()


def test_bad_vectors_are_refused_with_clear_errors(db):
    db.add_embeddings("a", [1.0, 0.0, 0.0])
    with pytest.raises(EmbeddingsError, match="3-dim"):
        db.add_embeddings("b", [1.0, 0.0])
    with pytest.raises(EmbeddingsError, match="NaN"):
        db.add_embeddings("c", [float("nan"), 0.0, 0.0])
    with pytest.raises(EmbeddingsError):
        db.query([1.0, 0.0])
    with pytest.raises(TypeError):
        db.add_embeddings(7, [1.0, 0.0, 0.0])
    with pytest.raises(ValueError):
        db.add_embeddings_batch(["a", "b"], [[1.0, 0.0, 0.0]])
    assert db.count_embeddings_in_collection() == 1


def test_a_failed_write_leaves_neither_the_file_nor_the_ram_matrix_changed(db):
    db.add_embeddings("a", [1.0, 0.0], {"n": 1})
    with pytest.raises(TypeError):
        db.add_embeddings_batch(["b", "c"], [[0.0, 1.0], [0.5, 0.5]], [{"ok": 1}, {"bad": object()}])
    assert db.count_embeddings_in_collection() == 1
    assert [k for k, _ in db.query([0.0, 1.0], top_k=5)] == ["a"]


def test_queries_on_an_empty_or_unknown_collection_return_nothing(db):
    assert db.query([1.0, 0.0], collection_name="nothing-here") == []
    assert db.count_embeddings_in_collection("nothing-here") == 0
    assert db.query([1.0, 0.0], top_k=0) == []


@pytest.mark.parametrize("damage", [
    lambda vector: vector[:4],  # four bytes short
    lambda vector: b"\x00\x00\xc0\x7f" + vector[4:],  # a float turned NaN: its cosine sorts first, any query
    lambda vector: b"\x00\x00\x80\x7f" + vector[4:],  # infinity
], ids=["short", "nan", "infinity"])
def test_a_damaged_vector_is_left_out_and_every_other_one_still_searched(tmp_path, damage):
    import sqlite3

    path = str(tmp_path / "v.db")
    db = SqliteEmbeddingsDB(path=path)
    db.add_embeddings_batch(["a", "b", "c"], [[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]], [{}, {}, {}], collection_name="c")
    db.close()
    con = sqlite3.connect(path)  # a damaged page SQLite's own checks do not see
    [vector] = con.execute("SELECT vector FROM ovos_vec_items WHERE key = 'b'").fetchone()
    con.execute("UPDATE ovos_vec_items SET vector = ? WHERE key = 'b'", (damage(vector),))
    con.commit()
    con.close()
    db = SqliteEmbeddingsDB(path=path)
    assert [row[0] for row in db.query([1.0, 0.1], top_k=3, collection_name="c")] == ["a", "c"]
    assert [row[0] for row in db.query([0.0, 1.0], top_k=1, collection_name="c")] == ["c"]
    db.close()


def test_a_missing_extension_is_the_error_the_vector_store_raises_not_a_failure_closing_it(monkeypatch):
    import ovos_memory_plugins.pgvector as pgvector
    from ovos_memory_plugins.errors import StorageError

    def no_extension(db):
        raise StorageError("pgvector is not installed in this database: run once: CREATE EXTENSION vector;")

    monkeypatch.setattr(pgvector, "open_pg_database", lambda url: object())
    monkeypatch.setattr(pgvector, "release_pg_database", lambda db: None)
    monkeypatch.setattr(pgvector, "ensure_pgvector", no_extension)
    with pytest.raises(StorageError, match="run once: CREATE EXTENSION vector"):
        pgvector.PgEmbeddingsDB(url="postgresql://ovos@db/memory")


def test_delete_where_deletes_exactly_the_items_whose_metadata_holds_the_values(tmp_path):
    db = SqliteEmbeddingsDB(path=str(tmp_path / "v.db"))
    sessions = ['a%_"b\\c', "aXY\"b\\c", "A%_\"B\\C", "other"]
    db.add_embeddings_batch([f"k{i}" for i in range(4)], [[1.0, float(i)] for i in range(4)],
                            [{"session_id": s, "content": "x"} for s in sessions], collection_name="c")
    assert db.delete_where({"session_id": sessions[0]}, collection_name="c") == 1
    assert db.delete_where({"session_id": sessions[0]}, collection_name="c") == 0
    assert sorted(r[0] for r in db.query([1.0, 1.0], top_k=10, collection_name="c")) == ["k1", "k2", "k3"]
    db.close()
