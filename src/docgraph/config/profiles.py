"""Per-model constants: each embedding model's profile of fusion and cohort settings.

The ranking constants of hybrid search (``[index]`` ``rrf_k``, ``lexical_weight``) and of
cohort search (``[retrieval]``: its fusion, composite weights and similarity gates) were
tuned with one model's similarities; another model ranks differently (multilingual-e5's
cosines sit in a narrow band near 0.8, MiniLM's spread from 0 to 0.7), so a gate or a fusion
weight right for one is wrong for the other. A model's profile holds the values chosen for it
on the tuning halves (``bench/model_tune.py``); selecting the model (``embed.model``) picks
them up, and a value set explicitly (``docgraph.toml``, ``DOCGRAPH_*``, a keyword argument)
still wins (:func:`apply_profile`, called by :class:`~docgraph.config.Settings`).

A model with no profile entry (``hashing``, ``openai:<model>``), or a key its profile does
not name, keeps the section's default, which is the default model's (``minilm-l6-int8``).
The table lives here, not beside the embedders, because settings resolve it and the config
package imports nothing of docgraph above it (``embedding`` imports ``config``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel

#: The sections a profile may set.
PROFILE_SECTIONS = ("index", "retrieval")


@dataclass(frozen=True)
class ModelProfile:
    """The settings an embedding model brings: ``{section: {key: value}}`` for the
    sections of :data:`PROFILE_SECTIONS`, and where the values were measured."""

    model: str
    values: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    evidence: str = ""


#: Every model with its own constants. The default model's profile is empty: the sections'
#: defaults were tuned with it.
MODEL_PROFILES: Mapping[str, ModelProfile] = MappingProxyType({
    "minilm-l6-int8": ModelProfile(
        "minilm-l6-int8", {},
        "the sections' defaults: tuned with this model (bench/quality.py, "
        "bench/tune_cohort.py)"),
    # Chosen on the tuning halves of SciFact, 2Wiki and GraphRAG-Bench novel, confirmed on
    # the test halves (bench/model_tune.py, bench/results/model_tune.json): vector_first
    # SciFact nDCG@10 +0.003 [-0.004, +0.011], 2Wiki R@2 0.000, R@5 -0.003 [-0.007, 0.000],
    # novel evidence@2 +0.019 [-0.019, +0.056], evidence@5 +0.009 [0.000, +0.028].
    # coverage_weight 0.05, chosen when SciFact and 2Wiki alone made the objective, gains
    # +0.002 with novel in it (below the 0.005 bar) and is no longer here; no hybrid
    # (index) value beat the current ones on tune.
    "e5-small-4bit": ModelProfile(
        "e5-small-4bit", {"retrieval": {"rrf_k": 10}},
        "bench/model_tune.py: chosen on the tuning halves, held on the test halves "
        "(bench/results/model_tune.json)"),
})


def profile_for(model: str) -> ModelProfile | None:
    """The profile of embedding model ``model``, or None when it has none."""
    return MODEL_PROFILES.get(model)


def apply_profile(sections: Mapping[str, BaseModel], model: str) -> dict[str, dict[str, Any]]:
    """Give every key that some profile names the value of ``model``'s profile (or, where
    that profile does not name it, the section's default), unless the key was set
    explicitly (pydantic's ``model_fields_set``); returns ``{section: {key: value}}`` of the
    values ``model``'s profile set, so a caller can say where a value came from.

    A key set this way stays out of ``model_fields_set`` (it was not the user's), so
    applying another model's profile later replaces it.
    """
    profile = profile_for(model)
    own = profile.values if profile is not None else {}
    applied: dict[str, dict[str, Any]] = {}
    for name in PROFILE_SECTIONS:
        section = sections[name]
        named = {key for p in MODEL_PROFILES.values() for key in p.values.get(name, {})}
        for key in sorted(named):
            if key in section.model_fields_set:
                continue
            if key in own.get(name, {}):
                value = own[name][key]
                applied.setdefault(name, {})[key] = value
            else:
                value = type(section).model_fields[key].get_default(call_default_factory=True)
            setattr(section, key, value)
            section.model_fields_set.discard(key)
    return applied
