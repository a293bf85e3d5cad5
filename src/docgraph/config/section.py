"""The base of every settings section: unknown keys are errors, and a field may be given by
its name as well as by an alias."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A section of the settings (``[store]``, ``[loader]``, ...)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
