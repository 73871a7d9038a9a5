"""The store's SQLite file removed or replaced while xover has it open (Store.gone): SQLite writes on into the
unlinked file, so a run must say its records are lost rather than end as if stored."""

from __future__ import annotations

import os
import re
from types import SimpleNamespace

import pytest
from sqlalchemy import text

from xover.store.session import Store, StoreGone, file_identity, moved_away


def _stat(device: int, inode: int) -> os.stat_result:
    return SimpleNamespace(st_dev=device, st_ino=inode)  # type: ignore[return-value]


def test_the_file_still_at_its_path_is_in_place():
    assert moved_away((1, 2), _stat(1, 2)) is None


def test_nothing_at_its_path_is_removed():
    assert moved_away((1, 2), None) == "removed"


def test_another_inode_or_device_at_its_path_is_replaced():
    assert moved_away((1, 2), _stat(1, 3)) == "replaced"
    assert moved_away((1, 2), _stat(4, 2)) == "replaced"


def test_a_store_notices_its_file_removed_and_makes_no_new_one(tmp_path):
    path = tmp_path / "xover.db"
    store = Store(str(path))
    try:
        assert store.gone() is None
        path.unlink()
        assert store.gone() == "removed"
        with pytest.raises(StoreGone, match=re.escape(f"the store {path} was removed during the run")) as refused:
            store.check_in_place()
        assert refused.value.exit_code == 1
        store.engine.dispose()  # a connection opened now would have made a new, empty file at the path
        with pytest.raises(StoreGone), store.session() as session:
            session.execute(text("SELECT 1"))
        assert not path.exists()
    finally:
        store.close()


def test_a_store_notices_its_file_replaced(tmp_path):
    path = tmp_path / "xover.db"
    store = Store(str(path))
    try:
        other = tmp_path / "other.db"
        other.write_bytes(path.read_bytes())
        assert file_identity(other.stat()) != file_identity(path.stat())
        os.replace(other, path)
        assert store.gone() == "replaced"
    finally:
        store.close()
