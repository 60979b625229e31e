"""One rule for an update id, whoever takes it: the receipt, the lock, the snapshots."""

from __future__ import annotations

import pytest

from services.updater.lock import UpdateLock
from services.updater.receipt import Receipt, ReceiptError
from services.updater.receipt_store import ReceiptStore
from services.updater.snapshot import full_backup, snapshot_all
from services.updater.update_id import InvalidUpdateId, new_update_id, validate_update_id
from shared.identity import current_identity

BAD = ["", "../up", "a.b", ".hidden", "-lead", "_lead", "a/b", "a b", "a" * 65, 7, None]
GOOD = ["u1", "a" * 64, "0a1b_c-D", new_update_id()]


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_what_cannot_name_a_file_is_refused_by_every_taker(bad, tmp_path):
    with pytest.raises(InvalidUpdateId):
        validate_update_id(bad)
    with pytest.raises(ReceiptError):
        Receipt.begin(bad, [], current_identity(), {})
    with pytest.raises(InvalidUpdateId):
        UpdateLock(tmp_path).acquire(bad)
    with pytest.raises(InvalidUpdateId):
        snapshot_all(tmp_path, bad)
    with pytest.raises(InvalidUpdateId):
        full_backup(tmp_path, bad)
    assert not any(tmp_path.iterdir())  # refused before anything was written


@pytest.mark.parametrize("good", GOOD, ids=["short", "longest", "every-kind-of-character", "generated"])
def test_an_update_id_names_its_receipt_file(good, tmp_path):
    assert validate_update_id(good) == good
    store = ReceiptStore(tmp_path)
    path = store.write(Receipt.begin(good, [], current_identity(), {}))
    assert path.name.endswith(f"_{good}.json")
    assert store.latest().update_id == good  # the file name pattern takes every valid id back
