"""The state file's form: cheap to write after every step, still one JSON document, backup intact."""

from __future__ import annotations

import json
import os
from pathlib import Path

from fleetplan.addrs import Address
from fleetplan.state import model
from fleetplan.state.storing import LocalStateStore


def _record(i: int, uid: str = "") -> model.ResourceRecord:
    return model.ResourceRecord(Address.parse(f"m{i}/core/ConfigMap/ns{i}/cm{i}"), "v1", uid=uid or f"uid-{i}",
                                outputs={"n": str(i)}, secret_hashes={"token": model.secret_hash(f"t{i}")})


def test_dumps_is_the_same_document_as_to_dict_one_record_per_line() -> None:
    state = model.State.new("demo")
    for i in range(5):
        state = state.with_record(_record(i))
    text = model.dumps(state)
    assert json.loads(text) == model.to_dict(state)
    record_lines = [line for line in text.splitlines() if line.lstrip().startswith('{"address"')]
    assert len(record_lines) == 5
    assert model.from_dict(json.loads(text), source="t").resources == state.resources


def test_a_replaced_record_is_encoded_anew() -> None:
    state = model.State.new("demo").with_record(_record(1, "first"))
    assert '"uid": "first"' in model.dumps(state)
    changed = state.with_record(_record(1, "second"))
    text = model.dumps(changed)
    assert '"uid": "second"' in text and '"uid": "first"' not in text
    assert model.dumps(state).count('"uid": "first"') == 1  # the old value still encodes as itself


def test_backup_keeps_the_previous_content_after_each_write(tmp_path: Path) -> None:
    store = LocalStateStore(tmp_path / "s.json")
    states = [store.persist(model.State.new("demo").with_record(_record(0)))]
    for i in range(1, 4):
        states.append(store.persist(states[-1].with_record(_record(i))))
        backup = json.loads((tmp_path / "s.json.backup").read_text())
        assert backup["serial"] == states[-2].serial
        assert len(backup["resources"]) == i
    current, backup_path = tmp_path / "s.json", tmp_path / "s.json.backup"
    assert os.stat(current).st_ino != os.stat(backup_path).st_ino
    assert oct(os.stat(backup_path).st_mode & 0o777) == "0o600"
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
