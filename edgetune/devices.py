"""``--device NAME``: a device profile, or a board from the inventory (then its profile)."""

from __future__ import annotations

from .errors import ProfileError
from .profiles import Profile, get_profile


def resolve_device(device: str) -> Profile:
    """The profile ``device`` names directly or through a board of the inventory.

    Raises ProfileError when it is neither (the error lists the known profiles)."""
    try:
        return get_profile(device)
    except ProfileError:
        from .remote.inventory import load_inventory

        boards = load_inventory()
        if device in boards:
            return get_profile(boards[device].profile)
        raise
