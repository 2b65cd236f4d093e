"""Template strings the DAGs share.

The DAGs render with `render_template_as_native_obj` (a list of pairs stays a list), and Jinja's native
mode reads any rendered text that looks like a Python literal as one: a run id `48213` became an int,
a pair named `1e3` the float 1000.0. :func:`text` renders a value as a JSON string literal, which native
mode reads back as the very same string.
"""

from __future__ import annotations

import os


def text(expression: str) -> str:
    """A template rendering `expression` as a string, also under native rendering."""
    return "{{ (" + expression + ") | string | tojson }}"


def schedule_from_env(variable: str, default: str) -> str | None:
    """The DAG's schedule: `variable` when set, `none` (or empty) for no schedule, else `default`."""
    value = os.environ.get(variable)
    if value is None:
        return default
    value = value.strip()
    return None if value.lower() in ("", "none", "null") else value
