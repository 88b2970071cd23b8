"""``kvtier trace ceilings`` on a three-request Mooncake trace worked by hand.

Requests A = [1 2 3], B = [1 2 4], C = [1 2 3] in 512-token hash blocks, each
of 3 x 512 + 1 = 1,537 tokens (all three blocks may hit); prompt tokens 4,611.
Infinite: B hits 1 2, C hits 1 2 3: 5 blocks, 2,560 / 4,611 = 55.5%.
At 3 blocks Belady drops B's block 4 (never asked again): 5 blocks, 55.5%;
LRU evicts A's block 3 (least recently used): C misses it, 4 blocks, 44.4%.
At 2 blocks both hit 1 2 in B and C: 44.4%.  (tests/sim/test_serving_oracle.py
works the same trace access by access.)
"""

from __future__ import annotations

import json

from kvtier.cli.main import main


def test_ceilings_of_a_hand_worked_trace(tmp_path, capsys) -> None:
    rows = [(0, [1, 2, 3]), (1000, [1, 2, 4]), (2000, [1, 2, 3])]
    path = tmp_path / "m.jsonl"
    path.write_text("".join(
        json.dumps({"timestamp": t, "input_length": 1537, "output_length": 8, "hash_ids": h}) + "\n"
        for t, h in rows
    ))  # fmt: skip
    # Llama-3.1-8B: 128 KiB of KV per token, 64 MiB per 512-token block: 0.2 GiB = 3 blocks
    argv = ["trace", "ceilings", str(path), "--capacity-blocks", "2",
            "--capacity-gib", "0.2", "--model", "Llama-3.1-8B"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "3 requests, 9 block lookups of 512 tokens, 4 distinct blocks" in out
    rows_out = [line.split() for line in out.splitlines() if line.startswith("│")]
    cells = [[c for c in r if c != "│"] for r in rows_out]
    assert cells == [["2", "0.12", "55.5", "44.4", "44.4"], ["3", "0.20", "55.5", "55.5", "44.4"]]
