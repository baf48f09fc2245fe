"""tidyio.KeyedStore: results by key on disk, resumable, with damaged files moved aside."""
import json
import math

import pytest

from tidyio import KeyedStore, key_digest, read_checked_json, write_checked_json


def test_a_stored_result_reads_back_by_its_key_and_only_by_it(tmp_path):
    store = KeyedStore(tmp_path / "runs", prefix="run_")
    key = {"omega": 0.3, "d": 500, "start": "semantic"}
    assert store.get(key) is None and key not in store
    store.put(key, {"train_loss": 0.0036, "curve": [1.0, math.nan]})
    assert key in store
    value = store.get(key)
    assert value["train_loss"] == 0.0036 and math.isnan(value["curve"][1])
    assert store.get({**key, "d": 1000}) is None
    # the key's order does not matter, its values do
    assert store.get({"start": "semantic", "d": 500, "omega": 0.3})["train_loss"] == 0.0036
    assert store.path(key).name == f"run_{key_digest(key)}.json"
    with pytest.raises(FileExistsError):
        store.put(key, {"train_loss": 1.0})
    store.put(key, {"train_loss": 1.0}, replace=True)
    assert store.get(key) == {"train_loss": 1.0}


def test_cached_computes_once(tmp_path):
    store = KeyedStore(tmp_path)
    calls = []

    def compute():
        calls.append(1)
        return {"x": (1, 2)}

    first = store.cached({"k": 1}, compute)
    second = KeyedStore(tmp_path).cached({"k": 1}, compute)
    assert calls == [1]
    # the value is what reading it back gives, whether just computed or not
    assert first == second == {"x": [1, 2]}


def test_a_damaged_file_or_one_of_another_key_is_moved_aside_and_computed_again(tmp_path, caplog):
    store = KeyedStore(tmp_path)
    key = {"alpha": 2.0}
    store.put(key, 1.5)
    path = store.path(key)
    path.write_text(path.read_text()[:-5])  # cut short
    assert store.get(key) is None
    assert not path.exists() and len(list(tmp_path.glob("*.unreadable-*"))) == 1
    # a checked file that answers another key (as a hash collision would)
    write_checked_json(path, {"key": {"alpha": 3.0}, "value": 9.0})
    assert store.cached(key, lambda: 2.5) == 2.5
    assert read_checked_json(path) == {"key": key, "value": 2.5}
    assert len(list(tmp_path.glob("*.unreadable-*"))) == 2
    assert "moved it aside" in caplog.text


def test_items_lists_every_readable_result(tmp_path):
    store = KeyedStore(tmp_path, prefix="p_")
    for k in range(3):
        store.put({"k": k}, {"v": k * k})
    (tmp_path / "p_garbled.json").write_text(json.dumps({"crc32": "0", "data": {}}))
    (tmp_path / "other.json").write_text("{}")
    assert sorted((key["k"], value["v"]) for key, value in store.items()) == [(0, 0), (1, 1), (2, 4)]
    assert sorted(v["v"] for v in store.values()) == [0, 1, 4]
    assert list(KeyedStore(tmp_path / "absent").items()) == []
