"""Judges named by vendor ('openai/<model>') are tested by the gate as the same judges without the prefix: a pair of
LLM judges sharing a name prefix is not a voter pool of its own."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from biasboard.ranking.reference import Reference, fit_with_reference
from biasboard.schemas.families import FamilyMap
from biasboard.simulate import SimulationConfig, simulate_days
from biasboard.transforms.cells import partial_cells

FAMILIES = FamilyMap.with_user_rules()


def _renamed(table: pa.Table, rename) -> pa.Table:
    judges = [rename(j) for j in table.column("judge").to_pylist()]
    return table.set_column(table.schema.get_field_index("judge"), "judge", pa.array(judges, pa.string()))


def test_vendor_prefixed_llm_judges_are_one_test_group_as_without_the_prefix():
    config = SimulationConfig(
        battles=20_000,
        models=10,
        judges=5,
        human_judges=1,
        days=1,
        seed=1,
        sd_u=0.06,
        sd_beta=0.0,
        sd_lambda=0.0,
        lambda0=0.0,
    )
    tables = [b for _, b, _ in simulate_days(config)]

    def vendor(name: str) -> str:
        if name.startswith("human"):
            return name
        return ("openai/" if ("gpt" in name or "claude" in name) else "google/") + name

    fits = {}
    for label, rename in (("plain", lambda j: j), ("vendor", vendor)):
        cells = [partial_cells(_renamed(t, rename), FAMILIES).cells for t in tables]
        fits[label] = fit_with_reference(cells, reference=Reference("judges", ("human-pool-1",)))
    plain, prefixed = (fits[k].gate.decisions for k in ("plain", "vendor"))
    assert not prefixed["reason"].str.contains(r"/\*\)").any(), prefixed["reason"].unique().to_list()
    assert prefixed["group_df"].to_list() == plain["group_df"].to_list()
    np.testing.assert_allclose(prefixed["group_p_holm"].to_numpy(), plain["group_p_holm"].to_numpy(), rtol=1e-6)
    assert prefixed["enabled"].to_list() == plain["enabled"].to_list()
    np.testing.assert_allclose(fits["vendor"].corrected.rating, fits["plain"].corrected.rating, atol=1e-8)
