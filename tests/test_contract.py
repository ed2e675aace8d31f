"""Every entry point of this distribution passes the memory-plugin contract (docs/index.md); that each
loads through ovos-plugin-manager is pinned in tests/test_public_api.py."""
from __future__ import annotations

import pytest

from ovos_memory_plugins.testing import CONTRACT_CHECKS, PERSON_SCOPE_CHECKS
from tests._postgres import POSTGRES_ENTRY_POINTS, fresh_url
from tests.conftest import our_entry_points
from tests.factories import all_factories

ENTRY_POINTS = [ep.name for ep in our_entry_points()]


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_each_entry_point_has_a_test_factory(name):
    assert name in all_factories(), f"tests/factories has no module for {name}"


#: Every entry point on its factory's store, and those that can on PostgreSQL too.
STORES = [pytest.param(name, "default", id=name) for name in ENTRY_POINTS] + [
    pytest.param(name, "postgres", id=f"{name}-postgres", marks=pytest.mark.postgres)
    for name in ENTRY_POINTS if name in POSTGRES_ENTRY_POINTS]


#: Person scope whose people own none of the kit's sessions: every check runs on guests, through
#: the mapping of session ids to memory keys.
GUESTS_ONLY = {"scope": "person", "people": {"nobody-here": ["nobody-here-*"]}}


def _factory(name, store, tmp_path, scope=None):
    make = all_factories()[name]
    counter = iter(range(1000))

    def factory(overrides):
        folder = tmp_path / f"f{next(counter)}"
        folder.mkdir()
        if scope is not None:
            overrides = {**scope, **overrides}
        if store == "postgres":  # a schema of its own: fresh and empty, as the kit requires
            overrides = {**overrides, "db_url": fresh_url()}
        return make(folder, overrides)

    return factory


@pytest.mark.parametrize("check", CONTRACT_CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
@pytest.mark.parametrize(("name", "store"), STORES)
def test_contract(name, store, check, tmp_path):
    check(_factory(name, store, tmp_path))


@pytest.mark.parametrize("check", CONTRACT_CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
@pytest.mark.parametrize(("name", "store"), STORES)
def test_contract_in_person_scope_for_guests(name, store, check, tmp_path):
    check(_factory(name, store, tmp_path, GUESTS_ONLY))


@pytest.mark.parametrize("check", PERSON_SCOPE_CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
@pytest.mark.parametrize(("name", "store"), STORES)
def test_person_scope(name, store, check, tmp_path):
    check(_factory(name, store, tmp_path))
