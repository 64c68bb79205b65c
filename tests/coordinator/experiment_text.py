"""The head of the experiment files the coordinator's tests write: ``[experiment]``, an insecure
``[coordinator]`` and three ``[[parties]]`` on loopback addresses nothing listens on (loading and checking a
file contacts no party; a test that runs one starts its own daemons and rewrites the addresses)."""

from __future__ import annotations


def head(name: str = "t", seed: int = 1) -> str:
    """The file up to its ``[model]`` table."""
    parties = "".join(f'[[parties]]\nid = {i}\naddress = "127.0.0.1:{i}"\n' for i in (1, 2, 3))
    return (
        f'\n[experiment]\nname = "{name}"\noutput_dir = "out"\nseed = {seed}\n\n'
        f"[coordinator]\ninsecure = true\n\n{parties}"
    )
