"""scripts/benchmark_app.py's helpers run against the current app (the script is not run whole: it takes minutes)."""

from __future__ import annotations

import pytest

from scripts import benchmark_app


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_texts_of_exact_length_and_bertviz_html_size(app_state):
    tokenizer = app_state.models.bi_encoder.tokenizer
    source = "otters play on the river bank while bats hunt moths over the water at night " * 4
    text = benchmark_app.text_of_tokens(tokenizer, source, 16)
    assert len(tokenizer(text)["input_ids"]) == 16
    one, two = (benchmark_app.unrounded_head_view_bytes(app_state, text, layers) for layers in (1, 2))
    assert 10_000 < one < two  # bertviz's own page, larger with each layer it holds
