"""`json_schema.fits`: the checks JSON Schema makes, for the keywords aiayn's checked
schemas use (the same dicts the service publishes)."""

from __future__ import annotations

import pytest

from aiayn.json_schema import COUNT, NUMBER, STRING, array, fits, obj


@pytest.mark.parametrize("value, schema, ok", [
    (1, NUMBER, True), (1.5, NUMBER, True), (True, NUMBER, False), ("1", NUMBER, False),
    (2, COUNT, True), (2.0, COUNT, True), (2.5, COUNT, False), (0, COUNT, False),
    (False, COUNT, False), (None, {"type": ["number", "null"]}, True),
    ("x", {"type": ["number", "null"]}, False), (3, {**COUNT, "maximum": 2}, False),
    ("up", {"enum": ["up", "down"]}, True), ("left", {"enum": ["up", "down"]}, False),
    ("s", {"description": "anything"}, True),
])  # fmt: skip
def test_types_enums_and_bounds_are_json_schemas(value, schema, ok):
    assert fits(value, schema) is ok


def test_objects_need_their_required_keys_and_every_property_and_item_fits():
    row = obj({"name": STRING, "sizes": array(COUNT)}, ("name",))
    assert fits({"name": "a"}, row) and fits({"name": "a", "sizes": [1, 2], "more": 0}, row)
    assert not fits({"sizes": [1]}, row)  # required
    assert not fits({"name": "a", "sizes": [1, 0]}, row)  # an item
    assert not fits({"name": 1}, row) and not fits([{"name": "a"}], row)


def test_a_keyword_it_does_not_check_is_an_error_not_a_pass():
    with pytest.raises(ValueError, match="pattern"):
        fits("abc", {**STRING, "pattern": "^x"})
