"""The package's library API (audit/__init__.py): its names load on first use, and all of them resolve."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import audit


@pytest.mark.parametrize("name", audit.__all__)
def test_every_exported_name_is_the_object_of_its_module(name: str) -> None:
    home = {"errors": "audit.errors", "inventory": "audit.inventory", "pipeline": "audit.pipeline"}
    owners = [m for m in home.values() if hasattr(importlib.import_module(m), name)]
    assert owners and getattr(audit, name) is getattr(importlib.import_module(owners[0]), name)


def test_an_unknown_name_is_an_attribute_error_and_submodules_still_import() -> None:
    with pytest.raises(AttributeError, match="no_such_thing"):
        audit.no_such_thing  # noqa: B018
    from audit import defaults  # a submodule, through the same lookup

    assert defaults.__name__ == "audit.defaults"


def test_importing_one_module_does_not_load_the_pipeline() -> None:
    code = "import sys, audit.errors; print(sorted(m for m in ('audit.pipeline', 'pandas') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr
