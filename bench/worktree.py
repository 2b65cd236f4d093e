"""Another revision of this repository checked out beside the working tree, for a bench that compares
revisions in one run: the same data, the same machine, the same quarter hour."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def add(rev: str, tree: Path) -> Path:
    """A detached git worktree of `rev` at `tree` (code run from it with PYTHONPATH=tree)."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), rev], check=True)
    return tree


def remove(tree: Path) -> None:
    if tree.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
