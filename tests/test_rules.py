"""Validation rules and the family map, checked row by row on small Arrow tables."""

from __future__ import annotations

import datetime as dt

import polars as pl
import pyarrow as pa
import pytest
from biasboard.schemas.battle import BATTLE_REQUIRED
from biasboard.schemas.deadletter import MAX_RESPONSE_LENGTH
from biasboard.schemas.errors import InputError
from biasboard.schemas.families import FamilyMap, parse_rules
from biasboard.schemas.names import AliasMap
from biasboard.schemas.rules import BATTLE_REASONS, SCORE_REASONS, parse_timestamps, timestamp_expr, timestamps_valid
from biasboard.transforms.validate import SeenIds, validate_battles, validate_scores

UTC = dt.timezone.utc
T0 = dt.datetime(2024, 5, 1, 12, tzinfo=UTC)


def battles(**overrides) -> dict:
    """One valid battle as column lists, with some fields replaced."""
    row = {
        "battle_id": ["b1"],
        "ts": pa.array([T0], pa.timestamp("us", tz="UTC")),
        "judge": ["gpt-4"],
        "model_a": ["claude-3-opus"],
        "model_b": ["llama-3-70b"],
        "winner": ["model_a"],
        "len_a": [100],
        "len_b": [50],
    }
    row.update(overrides)
    return row


def reason_of(**overrides) -> str | None:
    out = validate_battles(pa.table(battles(**overrides)))
    assert out.read == 1
    if out.valid.height == 1:
        assert out.dead_letters.num_rows == 0
        return None
    return out.dead_letters.column("reason")[0].as_py()


def test_valid_battle_is_kept():
    assert reason_of() is None


@pytest.mark.parametrize("column", BATTLE_REQUIRED)
@pytest.mark.parametrize("blank", [None, "", "   "])
def test_missing_required_field(column, blank):
    if column == "ts":
        value = pa.array([blank], pa.string())
        expected = "missing:ts"
    else:
        value = [blank]
        expected = f"missing:{column}"
    assert reason_of(**{column: value}) == expected


@pytest.mark.parametrize(
    "winner, ok",
    [
        ("model_a", True),
        ("model_b", True),
        ("tie", True),
        ("tie (bothbad)", True),
        ("  Model_B ", True),
        ("TIE (BOTHBAD)", True),
        ("tie(bothbad)", False),
        ("A", False),
        ("1", False),
        ("error", False),
    ],
)
def test_winner_values(winner, ok):
    assert reason_of(winner=[winner]) == (None if ok else "bad_winner")


@pytest.mark.parametrize(
    "ts, ok",
    [
        (pa.array(["2024-05-01T12:00:00Z"]), True),
        (pa.array(["2024-05-01T14:00:00+02:00"]), True),
        (pa.array(["2024-05-01 12:00:00.250"]), True),
        (pa.array(["2024-05-01"]), True),
        (pa.array([1714564800.5]), True),  # FastChat float tstamp
        (pa.array([1714564800], pa.int64()), True),
        (pa.array([dt.datetime(2024, 5, 1, 12)], pa.timestamp("ms")), True),  # tz-naive read as UTC
        (pa.array(["yesterday"]), False),
        (pa.array(["2024-13-45T00:00:00"]), False),
        (pa.array([1714564800000], pa.int64()), False),  # milliseconds mistaken for seconds
        (pa.array([0.0]), False),
        (pa.array([float("nan")]), False),
    ],
)
def test_timestamps(ts, ok):
    assert reason_of(ts=ts) == (None if ok else "bad_timestamp")


def test_timestamps_parsed_to_utc_instants_whatever_the_mix_of_forms():
    texts = ["2024-05-01T14:00:00+02:00", " 2024-05-01 12:00:00 ", "2024-05-01T12:00:00Z", "bad", None, "2024-05-01"]
    frame = pl.DataFrame({"ts": texts})
    parsed = parse_timestamps(frame).to_list()
    assert parsed == [T0, T0, T0, None, None, T0.replace(hour=0)]
    # the fast path gives exactly what the all-forms expression gives
    assert frame.select(timestamp_expr(pl.String)).to_series().to_list() == parsed


@pytest.mark.parametrize(
    "len_a, len_b, reason",
    [
        ([0], [10], None),
        ([None], [10], None),
        ([-1], [10], "negative_length"),
        ([10], [-5], "negative_length"),
        ([MAX_RESPONSE_LENGTH], [1], None),
        ([MAX_RESPONSE_LENGTH + 1], [1], "absurd_length"),
        (pa.array([float("inf")]), [1], "absurd_length"),
        (pa.array([float("nan")]), [1], "bad_length"),
        (["12"], ["7"], None),
        (["twelve"], ["7"], "bad_length"),
    ],
)
def test_lengths(len_a, len_b, reason):
    assert reason_of(len_a=len_a, len_b=len_b) == reason


def test_precedence_one_reason_per_row():
    # missing judge beats a bad timestamp, which beats a bad winner, which beats a negative length
    assert reason_of(judge=[""], ts=pa.array(["nope"]), winner=["x"], len_a=[-1]) == "missing:judge"
    assert reason_of(ts=pa.array(["nope"]), winner=["x"], len_a=[-1]) == "bad_timestamp"
    assert reason_of(winner=["x"], len_a=[-1]) == "bad_winner"
    assert reason_of(len_a=[-1], len_b=[MAX_RESPONSE_LENGTH * 2]) == "negative_length"
    assert reason_of(battle_id=[None], model_a=[None]) == "missing:battle_id"


def test_self_battle_is_valid_extra_columns_ignored_optional_absent():
    table = pa.table(
        {
            "battle_id": ["s1"],
            "ts": pa.array([T0], pa.timestamp("us", tz="UTC")),
            "judge": ["human"],
            "model_a": ["gpt-4o"],
            "model_b": ["gpt-4o"],
            "winner": ["tie"],
            "some_extra": [{"x": 1}],
        }
    )
    out = validate_battles(table)
    assert out.valid.height == 1 and out.dead_letters.num_rows == 0
    assert out.valid.get_column("_len_a").to_list() == [None]
    assert "some_extra" not in out.valid.columns


def test_fastchat_column_names():
    cols = battles()
    cols["tstamp"] = pa.array([1714564800.0])
    cols["question_id"] = cols.pop("battle_id")
    del cols["ts"]
    out = validate_battles(pa.table(cols))
    assert out.valid.height == 1


def test_duplicates_first_valid_occurrence_kept_across_batches():
    seen = SeenIds()
    first = validate_battles(
        pa.table(battles(battle_id=["a", "b", "a", "c"], winner=["bad", "tie", "tie", "tie"], **_four())), seen
    )
    # row 0 ("a") is malformed, so the later valid "a" is the first valid occurrence and is kept
    assert first.valid.height == 3 and first.rejected == {"bad_winner": 1}
    assert first.dead_letters.column("battle_id").to_pylist() == ["a"]
    second = validate_battles(pa.table(battles(battle_id=["c", "d", "d", "b"], winner=["tie"] * 4, **_four())), seen)
    assert second.valid.height == 1
    assert second.dead_letters.column("battle_id").to_pylist() == ["c", "d", "b"]
    assert second.rejected == {"duplicate_battle_id": 3}
    rows = second.dead_letters.column("source_row").to_pylist()
    assert rows == [0, 2, 3]


def _four() -> dict:
    return {
        "ts": pa.array([T0] * 4, pa.timestamp("us", tz="UTC")),
        "judge": ["j"] * 4,
        "model_a": ["a"] * 4,
        "model_b": ["b"] * 4,
        "len_a": [1] * 4,
        "len_b": [1] * 4,
    }


@pytest.mark.parametrize("h1_buckets", [97, 1 << 40])
def test_seen_ids_admit_matches_a_python_set(h1_buckets):
    """Exact "seen before" across batches, also when many distinct ids share h1 (forced collisions).

    (Within a batch, ids reach ``admit`` already distinct: the batch keeps first occurrences by value.)
    """
    import numpy as np

    rng = np.random.default_rng(3)
    seen, truth = SeenIds(), set()
    for _ in range(30):
        ids = rng.choice(5000, size=rng.integers(1, 400), replace=False)
        h1 = (ids.astype(np.uint64) * np.uint64(2654435761)) % np.uint64(h1_buckets)
        h2 = ids.astype(np.uint64)
        expected = []
        for i in ids.tolist():
            expected.append(i not in truth)
            truth.add(i)
        assert seen.admit(h1, h2).tolist() == expected
    assert len(seen) == len(truth)


def test_seen_ids_compute_a_batchs_second_hashes_only_when_a_later_batch_looks_them_up():
    """``admit`` with a function for h2 answers as with the array; the first batch's function runs only later."""
    import numpy as np

    rng = np.random.default_rng(4)
    eager, lazy, calls = SeenIds(), SeenIds(), []
    for batch in range(4):
        ids = rng.choice(3000, size=500, replace=False).astype(np.uint64)
        h1, h2 = ids % np.uint64(97), ids  # many h1 collisions: h2 decides

        def second(h2=h2, batch=batch):
            calls.append(batch)
            return h2

        assert lazy.admit(h1, second).tolist() == eager.admit(h1, h2).tolist()
        assert calls == list(range(batch + 1)) if batch else calls == []  # the first batch's: only once the second came
    assert len(lazy) == len(eager)


def test_dictionary_coded_names_are_rejected_as_plain_text_is():
    """Name columns read as dictionary codes (the ingest's Categorical) give plain text's valid rows and dead letters.

    Their blank values come from the name cleaning's distinct names (trimmed, aliased or not), not a second pass.
    """
    names = ["gpt-4", "", "  ", None, " gpt-4 ", "\t", "claude-3", "gpt-4"]
    n = len(names)
    cols = battles(
        battle_id=[f"b{i}" for i in range(n)],
        ts=pa.array([T0] * n, pa.timestamp("us", tz="UTC")),
        judge=names,
        model_a=list(reversed(names)),
        model_b=["m"] * n,
        winner=["tie"] * n,
        len_a=[1] * n,
        len_b=[1] * n,
    )
    frame = pl.from_arrow(pa.table(cols))
    assert isinstance(frame, pl.DataFrame)
    for aliases in (None, AliasMap({"claude-3": "claude-3-opus"})):
        plain = validate_battles(pa.table(cols), aliases=aliases)
        coded = validate_battles(frame.with_columns(pl.col("judge", "model_a").cast(pl.Categorical)), aliases=aliases)
        assert coded.dead_letters.equals(plain.dead_letters) and coded.rejected == plain.rejected
        assert coded.kept is not None and plain.kept is not None and (coded.kept == plain.kept).all()
        assert plain.rejected == {"missing:judge": 4, "missing:model_a": 2}


def test_first_occurrences_of_picked_rows_equal_those_of_the_gathered_ids():
    """``first_occurrences(ids, h1, rows)`` (hashes of every row, candidates picked) is the gathered ids' answer.

    Also when distinct ids share ``h1`` (forced collisions: only the strings tell them apart).
    """
    import numpy as np
    from biasboard.transforms.validate import first_occurrences

    rng = np.random.default_rng(5)
    ids = pl.Series([f"id{v}" for v in rng.integers(0, 300, 2000)])
    rows = np.flatnonzero(rng.random(2000) < 0.7)
    for h1 in (ids.hash(11).to_numpy(), ids.str.len_bytes().cast(pl.UInt64).to_numpy()):  # real and colliding
        picked = ids.gather(rows)
        expected = picked.is_first_distinct().to_numpy()
        assert (first_occurrences(ids, h1, rows) == expected).all()
        assert (first_occurrences(picked, h1[rows]) == expected).all()
    assert (first_occurrences(ids) == ids.is_first_distinct().to_numpy()).all()


def test_dead_letter_keeps_original_text_and_location():
    table = pa.table(battles(battle_id=["x1", "x2"], **_two(len_a=["12", "oops"])))
    out = validate_battles(table, source_file="f.parquet", row_offset=40)
    dl = out.dead_letters.to_pylist()
    assert len(dl) == 1
    assert dl[0]["len_a"] == "oops" and dl[0]["reason"] == "bad_length"
    assert dl[0]["source_file"] == "f.parquet" and dl[0]["source_row"] == 41


def _two(**over) -> dict:
    cols = {
        "ts": pa.array([T0] * 2, pa.timestamp("us", tz="UTC")),
        "judge": ["j"] * 2,
        "model_a": ["a"] * 2,
        "model_b": ["b"] * 2,
        "winner": ["tie"] * 2,
        "len_a": [1, 2],
        "len_b": [1, 2],
    }
    cols.update(over)
    return cols


def test_score_rules_every_reason():
    table = pa.table(
        {
            "score_id": ["s1", "s2", "s3", "s4", "s5", "s6", "s1", "s7"],
            "ts": ["2024-05-01", "2024-05-01", "bad", "2024-05-01", "2024-05-01", "2024-05-01", "2024-05-01", None],
            "judge": ["gpt-4"] * 8,
            "model": ["m1", "m1", "m1", "m1", "m1", "", "m1", "m1"],
            "prompt_id": ["p"] * 8,
            "score": [5, 0, 5, 7.25, 3, 3, 4, 3],  # 7.25: off the half-point grid (7.5 is a grade)
            "len": [10, 10, 10, 10, -3, 10, 10, 10],
        }
    )
    out = validate_scores(table)
    assert out.valid.height == 1 and out.valid.get_column("_score").to_list() == [5]
    assert out.rejected == {
        "bad_score": 2,
        "bad_timestamp": 1,
        "negative_length": 1,
        "missing:model": 1,
        "duplicate_score_id": 1,
        "missing:ts": 1,
    }
    assert set(out.rejected) <= set(SCORE_REASONS)


def test_reason_lists_are_complete():
    assert len(BATTLE_REASONS) == len(set(BATTLE_REASONS)) == len(BATTLE_REQUIRED) + 7


# --- family map -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, family",
    [
        ("gpt-4-0613", "openai"),
        ("GPT-4o-2024-05-13", "openai"),
        ("chatgpt-4o-latest", "openai"),
        ("o1-preview", "openai"),
        ("o3-mini", "openai"),
        ("gpt4all-13b-snoozy", "nomic"),
        ("claude-3-5-sonnet-20240620", "anthropic"),
        ("gemini-1.5-pro", "google"),
        ("gemma-2-27b-it", "google"),
        ("palm-2", "google"),
        ("meta-llama/Llama-2-70b-chat-hf", "meta"),
        ("llama-3-8b-instruct", "meta"),
        ("vicuna-13b", "lmsys"),
        ("mixtral-8x7b-instruct-v0.1", "mistral"),
        ("mistral-large-2407", "mistral"),
        ("qwen2-72b-instruct", "alibaba"),
        ("deepseek-v2.5", "deepseek"),
        ("yi-34b-chat", "01-ai"),
        ("command-r-plus", "cohere"),
        ("phi-3-medium-4k-instruct", "microsoft"),
        ("human", "human"),
        ("totally-new-model", "unknown"),
        # names that once matched the wrong rule
        ("gpt-judge-1", "openai"),  # not gpt-j
        ("gpt-j-6b", "eleutherai"),
        ("text_davinci_003", "openai"),  # AlpacaEval spells it with underscores
        ("alpaca_eval_gpt4", "openai"),  # an AlpacaEval annotator, not Stanford's Alpaca
        ("weighted_alpaca_eval_gpt4_turbo", "openai"),
        ("alpaca-7b", "stanford"),
        # names of the project's real data (/work/shared/data) the map got wrong: the LMArena voters and MT-Bench's
        # human judges were of no family but "unknown" (so the audit left them out of the other judges), a UMD
        # Llama-2 fine-tune was Anthropic's (802 AlpacaEval battles in bedrock_claude's baseline), LLMFAO's spaced
        # names and the MTEB arena's vendor embeddings were unknown, a Bedrock model id was no Claude
        ("arena_user_973", "human"),
        ("arena_user_", "human"),
        ("author_0", "human"),
        ("claude2-alpaca-13b", "umd"),
        ("Code Llama Instruct (13B)", "meta"),
        ("Alpaca (7B)", "stanford"),
        ("Open-Assistant Pythia SFT-4 (12B)", "openassistant"),
        ("Jurassic 2 Ultra", "ai21"),
        ("Luminous Supreme Control", "aleph-alpha"),
        ("StarCoderChat Alpha (16B)", "bigcode"),
        ("RedPajama-INCITE Chat (7B)", "together"),
        ("GPT-NeoXT-Chat-Base (20B)", "together"),
        ("text-embedding-3-large", "openai"),
        ("text-embedding-004", "google"),
        ("embed-english-v3.0", "cohere"),
        ("Alibaba-NLP/gte-Qwen2-7B-instruct", "alibaba"),
        ("anthropic.claude-3-sonnet-20240229-v1:0", "anthropic"),
        ("palmyra-x-004", "writer"),  # Writer's, not PaLM
        ("gpt-jt-6b", "together"),  # not OpenAI's
        ("gpt-sw3-6.7b", "ai-sweden"),
    ],
)
def test_default_families(name, family):
    assert FamilyMap.with_user_rules().family_of(name) == family


def test_user_rules_come_first_and_extend():
    user = '{"rules": [{"prefix": "gpt-4", "family": "azure"}, {"regex": "^acme-", "family": "acme"}]}'
    fmap = FamilyMap.with_user_rules(user, "mine.json")
    assert fmap.family_of("gpt-4-turbo") == "azure"  # overrides the default
    assert fmap.family_of("gpt-3.5-turbo") == "openai"  # defaults still apply after
    assert fmap.family_of("acme-7b") == "acme"
    simple = FamilyMap.with_user_rules('{"acme": "acme-corp"}', "simple.json")
    assert simple.family_of("ACME-7b") == "acme-corp"


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        '{"rules": [{"prefix": "x"}]}',
        '{"rules": [{"regex": "(", "family": "f"}]}',
        # were taken: a null family became the family "None" (every rule so written one family), a list its repr,
        # an empty prefix matched every name
        '{"rules": [{"prefix": "my-judge", "family": null}]}',
        '{"gpt": ["openai"]}',
        '{"": "everyone"}',
        '{"rules": [{"regex": "", "family": "f"}]}',
        '{"rules": [{"prefix": 5, "family": "f"}]}',
    ],
)
def test_bad_family_map_names_the_file(text):
    with pytest.raises(InputError, match=r"mine\.json"):
        parse_rules(text, "mine.json")


def test_a_user_regex_means_what_python_says_whatever_its_case():
    """The regex text was lower-cased to match the lower-cased names: \\D (not a digit) became \\d, so
    ``^my\\Dmodel`` missed ``my-model``, and ``\\Z`` became the bad escape ``\\z`` (refused)."""
    fmap = FamilyMap.with_user_rules(
        '{"rules": [{"regex": "^my\\\\Dmodel", "family": "mine"}, {"regex": "^Acme\\\\Z", "family": "acme"}]}', "m.json"
    )
    assert fmap.family_of("my-model") == "mine"
    assert fmap.family_of("my7model") == "unknown"
    assert fmap.family_of("ACME") == "acme"


def _iso_texts():
    """ISO-like text: valid forms, and near misses (bad calendar days, hour 24, odd zones, stray spaces)."""
    from hypothesis import strategies as st

    digits = st.integers
    ymd = st.tuples(digits(1985, 2105), digits(0, 13), digits(0, 32))
    date = ymd.map(lambda t: f"{t[0]:04d}-{t[1]:02d}-{t[2]:02d}")
    clock = st.tuples(digits(0, 25), digits(0, 61), digits(0, 61)).map(lambda t: f"{t[0]:02d}:{t[1]:02d}:{t[2]:02d}")
    fraction = st.sampled_from(["", ".5", ".25", ".123", ".1234", ".123456", ".1234567", ".123456789", "."])
    zone = st.sampled_from(["", "Z", "+02:00", "-05:30", "+00:00", "+23:59", "+24:00", "+0200", "+02", "z", "UTC"])
    sep = st.sampled_from(["T", " ", "t", "  "])
    pad = st.sampled_from(["", " ", "\t"])
    full = st.tuples(pad, date, sep, clock, fraction, zone, pad).map("".join)
    return st.lists(st.one_of(full, date, st.none(), st.text(max_size=12)), min_size=1, max_size=40)


def test_fast_timestamp_parse_equals_the_polars_forms():
    """The Arrow fast path of ``parse_timestamps`` reads text exactly as the all-forms polars expression does."""
    from hypothesis import given, settings

    @settings(max_examples=200, deadline=None)
    @given(_iso_texts())
    def check(texts):
        frame = pl.DataFrame({"ts": pl.Series(texts, dtype=pl.String)})
        expected = frame.select(timestamp_expr(pl.String)).to_series().to_list()
        assert parse_timestamps(frame).to_list() == expected, texts

    check()


def test_timestamp_validity_equals_the_parse():
    """``timestamps_valid`` (the validator's check: no cast for the common forms) nulls the rows the parse nulls."""
    from hypothesis import given, settings

    @settings(max_examples=200, deadline=None)
    @given(_iso_texts())
    def check(texts):
        frame = pl.DataFrame({"ts": pl.Series(texts, dtype=pl.String)})
        assert timestamps_valid(frame).is_null().to_list() == parse_timestamps(frame).is_null().to_list(), texts

    check()
    # the window's edges with offsets: an instant of 1989 or 2100 written with a 1990 or 2099 date
    edges = ["1990-01-01T00:30:00+01:00", "1990-01-01T00:30:00-01:00", "2099-12-31T23:30:00-01:00"]
    edges += ["2099-12-31T23:30:00+01:00", "1991-01-01T00:00:00+23:59", "2098-12-31T23:59:59-23:59", None, ""]
    frame = pl.DataFrame({"ts": pl.Series(edges, dtype=pl.String)})
    assert timestamps_valid(frame).is_null().to_list() == [True, False, True, False, False, False, True, True]
    for other in (pl.Series([1.7e9, None, 5.0]), pl.Series(edges).cast(pl.Categorical)):
        frame = pl.DataFrame({"ts": other})
        assert timestamps_valid(frame).is_null().to_list() == parse_timestamps(frame).is_null().to_list()


def test_the_sure_year_screen_reads_four_digit_years_only():
    """``_sure_year`` (four view bytes at once) flags exactly the values opening with a year of 1991-2098."""
    from biasboard.schemas.rules import _sure_year

    texts = ["1991-01-01", "2098-12-31T23:59:59Z", "1990-06-01", "2099-01-01", "2024", "202", "", None, "19:0-01-01"]
    texts += ["1:99-01-01", "20/4-01-01", "٢٠٢٤-01-01", "2024é", "20\x0024", " 2024-01-01", "0000", "9999", "2024" * 9]
    expected = [t is not None and t[:4].isascii() and t[:4].isdigit() and 1991 <= int(t[:4]) <= 2098 for t in texts]
    series = pl.Series(texts, dtype=pl.String)
    assert _sure_year(series).tolist() == expected
    assert _sure_year(series.slice(3, 9)).tolist() == expected[3:12]  # a view with an offset
    assert _sure_year(pl.Series([1, 2])) is None


def test_a_user_maps_family_is_lower_cased_as_a_family_given_in_the_data_is():
    """Families given in the data are lower-cased (``OpenAI`` → ``openai``), so a user map's ``"family": "Acme"``
    kept as written never met a battle's given ``Acme``: the judge the map called ``Acme`` was a stranger to the
    models the data called so, and its own-family preference went unmeasured."""
    from biasboard.transforms.covariates import resolve_families

    fmap = FamilyMap.with_user_rules('{"rules": [{"prefix": "acme-judge", "family": " Acme "}]}', "m.json")
    assert fmap.family_of("acme-judge") == "acme"
    assert FamilyMap.with_user_rules('{"acme": "Acme-Corp"}', "m.json").family_of("acme-7b") == "acme-corp"
    df = pl.DataFrame(
        {"model_a": ["acme-7b"], "model_b": ["gpt-4"], "judge": ["acme-judge"],
         "family_a": ["Acme"], "family_b": [None], "judge_family": [None]},
        schema_overrides={"family_b": pl.String, "judge_family": pl.String},
    )  # fmt: skip
    out = resolve_families(df, fmap)
    assert out["family_a"].item() == out["judge_family"].item() == "acme"
