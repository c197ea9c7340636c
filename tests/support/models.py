"""Checks on the pydantic models Timeshare builds without validation
(``router.schemas.unchecked``)."""

from __future__ import annotations

from pydantic import BaseModel

__all__ = ["assert_as_validated"]


def assert_as_validated(model: BaseModel) -> None:
    """``model`` holds what its validated constructor would make of the same fields: the same
    values of the same types (``0 == 0.0``, so types are compared too), nested models alike.
    (An unchecked model counts every field as set; nothing in Timeshare reads which were.)"""
    again = type(model)(**dict(model))
    assert list(model.__dict__) == list(type(model).model_fields), "fields out of order"
    for name in type(model).model_fields:
        got, want = getattr(model, name), getattr(again, name)
        if isinstance(got, BaseModel):
            assert_as_validated(got)
            assert got == want, name
            continue
        assert type(got) is type(want), f"{name}: {type(got).__name__} != {type(want).__name__}"
        if isinstance(got, dict):
            assert got.keys() == want.keys() and all(got[k] is want[k] for k in got), name
        else:
            assert got == want, f"{name}: {got!r} != {want!r}"
