"""Probes of every entry point x flag, as a hostile new user would type them.

Rows are ``(id, argv, files, needle)`` like the corpus (cases.py): each must end
in exit 2 with one line naming ``needle``.  Generated from three families:

* numbers: each numeric flag given a negative, zero, non-finite, huge or
  non-numeric value where that value is outside what the flag means;
* files: each input-file flag given a missing file, a directory, an empty file
  and a file of junk bytes;
* the rest: unknown names (models, profiles, designs, regimes), malformed
  ``NODE=PATH`` targets, outputs that cannot be written.

``CHEAP`` names the probes that fail before any real work; they are corpus
cases too (run in-process by test_corpus.py).  The rest (a model import, a
device probe) run only under ``python -m tests.badinput.probe``.
"""

from __future__ import annotations

from tests.badinput.cases import VIDUR, Files, plan

HUGE = "1e30"
JUNK = b"\x00\xff\xfe junk \x89PNG\r\n"


def _num(prefix: str, cmd: str, flag: str, values: tuple[str, ...], files=None) -> list:
    """``cmd flag v`` for each of ``values`` (in a directory holding ``files``)."""
    base = dict(files or {})
    return [(f"{prefix}{flag[2:]}-{v}", f"{cmd} {flag} {v}", base, flag) for v in values]


def _file(prefix: str, cmd: str, name: str, needle: str | None = None, files=None) -> list:
    """``cmd`` with ``{f}`` standing for the file: missing, a directory, empty, junk."""
    base: Files = dict(files or {})
    kinds = {
        "missing": {},
        "dir": {f"{name}/x": ""},
        "empty": {name: ""},
        "junk": {name: JUNK},
    }
    return [
        (f"{prefix}-{kind}", cmd.format(f=name), {**base, **extra}, needle or name)
        for kind, extra in kinds.items()
    ]


NEG_ZERO_NAN = ("-1", "0", "nan", "x")
PLAN = "plan --base h100-2dimm-2ssd --trace long_doc --context-tokens 4096 --no-prune"
BENCH = "bench --steps 1"
BSERV = "bench-serving --requests 2 --designs gpu-only --blocks 256"
REPLAY = "real replay --plan p.parquet --target t --out o"
EMU = "real emulate --profile h20-8ssd --out o --no-check"
CAL = "real calibrate --emulate h20-8ssd --out o"
VAL = "real validate --hw h20-8ssd --no-fio --out o"
IOLOG = "real iolog --plan p.parquet --target ssd0=t --out o"
FIT = "trace fit a.parquet"
CAP = "trace capture --out c.parquet --steps 1 --context 64"
GEN = "trace gen-conversations --sessions 2 --out g.parquet"
CONV = "trace convert t.csv --out o.parquet"
STATS = "trace stats t.csv"
P = {"p.parquet": plan()}
T = {"t.csv": VIDUR + "1,2,3\n"}
TP = {**P, "t": "x"}

# probes that do real work before failing (a grid of simulations, a model load,
# a device set-up): run by the probe script only, not in the corpus
SLOW = {"plan-model", "plan-trace-missing"}

PROBES: list[tuple[str, str, Files, str]] = [
    # --- sim / sweep
    ("sim-steps-huge", "sim --steps 1000000000000", {}, "tokens"),
    ("sim-hw-nofile", "sim --hw nope.yaml", {}, "nope.yaml"),
    ("sim-hw-unknown", "sim --hw nope", {}, "nope"),
    ("sim-scen-unknown", "sim --scenario nope", {}, "nope"),
    *_file("sim-scen", "sim --scenario {f}", "s.yaml"),
    *_file("sim-hw", "sim --hw {f}", "h.yaml"),
    *_file("sim-plan", "sim --plan {f}", "q.parquet"),
    ("sweep-hw-unknown", "sweep --hw nope --factor ssds=1", {}, "nope"),
    ("sweep-values-empty", "sweep --factor ssds --values ,", {}, "ssds"),
    ("sweep-factor-noeq", "sweep --factor =1", {}, "--factor"),
    ("sweep-ssds-huge", "sweep --factor ssds=1000000", {}, "ssds"),
    ("sweep-gds-false", "sweep --factor gds --values false", {}, "gds"),
    # --- plan (the SLO search)
    *_num("plan-", PLAN, "--context-tokens", ("-1", "0", "nan", "1.5")),
    *_num("plan-", PLAN, "--docs", ("-1", "0", "nan")),
    *_num("plan-", PLAN, "--sparsity", ("-1", "2", "nan")),
    *_num("plan-", PLAN, "--steps", ("-1", "0")),
    *_num("plan-", PLAN, "--requests", ("-1", "1.5")),
    *_num("plan-", PLAN, "--ttft-p99", ("-1", "nan")),
    *_num("plan-", PLAN, "--tpot-p99", ("-1", "inf")),
    *_num("plan-", PLAN, "--min-tok-s", ("-1", "nan")),
    *_num("plan-", PLAN, "--dram-gib", ("-1", "0", "nan")),
    *_num("plan-", PLAN, "--jobs", ("-1", "0")),
    ("plan-ssd-counts-neg", f"{PLAN} --ssd-counts -1", {}, "--ssd-counts"),
    ("plan-ssd-counts-x", f"{PLAN} --ssd-counts x", {}, "--ssd-counts"),
    ("plan-ssd-models", f"{PLAN} --ssd-models nope", {}, "nope"),
    ("plan-dram-modules", f"{PLAN} --dram-modules nope", {}, "nope"),
    ("plan-designs", f"{PLAN} --designs nope", {}, "nope"),
    ("plan-base", "plan --base nope --trace long_doc", {}, "nope"),
    ("plan-model", f"{PLAN} --model nope", {}, "nope"),
    ("plan-trace-missing", "plan --base h100-2dimm-2ssd --trace nope.csv", {}, "nope.csv"),
    *_file("plan-prices", f"{PLAN} --prices {{f}}", "pr.yaml"),
    ("plan-out-file", f"{PLAN} --out f", {"f": "x"}, "--out"),
    # --- bench
    *_num("bench-", BENCH, "--steps", ("-1", "0", "nan")),
    *_num("bench-", BENCH, "--layers", ("-1", "0", "1.5")),
    *_num("bench-", BENCH, "--ssds", ("-1", "nan")),
    ("bench-hw", f"{BENCH} --hw nope", {}, "nope"),
    ("bench-model", f"{BENCH} --model nope", {}, "nope"),
    ("bench-out-devnull", f"{BENCH} --out /dev/null/x", {}, "/dev/null"),
    # --- bench-serving (checked before any run)
    *_num("bench-serving-", BSERV, "--requests", ("-1", "0", "1.5")),
    *_num("bench-serving-", BSERV, "--repeat", ("0", "nan")),
    *_num("bench-serving-", BSERV, "--target", ("0", "-1", "nan")),
    *[
        (f"bench-serving-blocks-{v}", f"{BSERV} --blocks {v}", {}, "--blocks")
        for v in ("0", "24", "x", "16,-16")
    ],  # fmt: skip
    ("bench-serving-design", f"{BSERV} --designs gpu-only,nope", {}, "nope"),
    ("bench-serving-hw", f"{BSERV} --hw nope", {}, "nope"),
    ("bench-serving-model", f"{BSERV} --model nope", {}, "nope"),
    ("bench-serving-out-devnull", f"{BSERV} --out /dev/null/x", {}, "/dev/null"),
    # --- profiles / models
    *_file("profiles-show", "profiles show {f}", "p.yaml"),
    ("profiles-show-none", "profiles show", {}, "show"),
    ("models-show-unknown", "models show nope", {}, "nope"),
    # --- real replay
    *_num("replay-", REPLAY, "--qd", ("-1", "nan", HUGE), P),
    *_num("replay-", REPLAY, "--pace-read-mbps", ("-1", "nan", "x"), P),
    *_num("replay-", REPLAY, "--pace-write-iops", ("-1", "inf"), P),
    *_file("replay-plan", "real replay --plan {f} --target t --out o", "q.parquet"),
    ("replay-hw", f"{REPLAY} --hw nope", P, "nope"),
    (
        "replay-targets-dir-file",
        "real replay --plan p.parquet --targets-dir f --out o",
        {**P, "f": "x"},
        "f",
    ),
    (
        "replay-out-file",
        "real replay --plan p.parquet --target t --out f",
        {**P, "f": "x", "t/x": ""},
        "--out",
    ),
    (
        "replay-out-devnull",
        "real replay --plan p.parquet --target t --out /dev/null/x",
        {**P, "t/x": ""},
        "/dev/null",
    ),
    # --- real emulate / calibrate
    *_num("emu-", EMU, "--n", ("-1", "0", "nan")),
    *_num("emu-", EMU, "--size", ("-1", "0", "nan", "1.5")),
    *_num("emu-", EMU, "--scale", ("-1", "0", "nan", "2")),
    ("emu-profile", "real emulate --profile nope --out o", {}, "nope"),
    ("emu-n-huge", f"{EMU} --n 100", {}, "--n"),
    ("emu-where-file", f"{EMU} --where f", {"f": "x"}, "f/"),
    ("emu-out-devnull", "real emulate --profile h20-8ssd --out /dev/null/x", {}, "/dev/null"),
    *_num("cal-", CAL, "--n", ("-1", "0")),
    *_num("cal-", CAL, "--scale", ("-1", "nan", "2")),
    *_num("cal-", CAL, "--size", ("-1", "0")),
    ("cal-none", "real calibrate --out o", {}, "--dir"),
    ("cal-dir-missing", "real calibrate --dir nope --out o", {}, "nope"),
    ("cal-dir-file", "real calibrate --dir f --out o", {"f": "x"}, "f"),
    ("cal-base", f"{CAL} --base nope", {}, "nope"),
    ("cal-profile-devnull", f"{CAL} --profile /dev/null/x.yaml", {}, "/dev/null"),
    ("cal-out-devnull", "real calibrate --emulate h20-8ssd --out /dev/null/x", {}, "/dev/null"),
    # --- real validate
    *_num("val-", VAL, "--n", ("nan", "1.5")),
    *_num("val-", VAL, "--steps", ("-1", "nan")),
    *_num("val-", VAL, "--scale", ("-1", "inf")),
    ("val-hw", "real validate --hw nope --no-fio --out o", {}, "nope"),
    ("val-emulate", "real validate --emulate nope --out o", {}, "nope"),
    ("val-pace", "real validate --pace nope --out o", {}, "nope"),
    ("val-dir-missing", f"{VAL} --dir nope/deeper", {}, "nope"),
    ("val-dir-file", f"{VAL} --dir f", {"f": "x"}, "f:"),
    ("val-designs", f"{VAL} --designs nope", {}, "nope"),
    ("val-out-devnull", "real validate --hw h20-8ssd --no-fio --out /dev/null/x", {}, "/dev/null"),
    ("val-out-file", "real validate --hw h20-8ssd --no-fio --out f", {"f": "x"}, "--out"),
    # --- real iolog / cleanup
    *_num("iolog-", IOLOG, "--iodepth", ("-1", "0", "nan"), {**P, "t": "x"}),
    *_file("iolog-plan", "real iolog --plan {f} --target ssd0=t --out o", "q.parquet"),
    ("iolog-target-noeq", "real iolog --plan p.parquet --target t --out o", P, "--target"),
    ("iolog-target-node", "real iolog --plan p.parquet --target ssd7=t --out o", TP, "ssd7"),
    ("iolog-target-missing", "real iolog --plan p.parquet --target ssd0=nope --out o", P, "nope"),
    (
        "iolog-target-dir",
        "real iolog --plan p.parquet --target ssd0=d --out o",
        {**P, "d/x": ""},
        "d",
    ),
    *_file("iolog-records", f"{IOLOG} --records {{f}}", "r.parquet", files={**P, "t": "x"}),
    (
        "iolog-out-file",
        "real iolog --plan p.parquet --target ssd0=t --out f",
        {**P, "t": "x", "f": "x"},
        "f:",
    ),
    ("cleanup-runtime-file", "real cleanup --runtime-dir f", {"f": "x"}, "f"),
    # --- trace stats / convert / gen-conversations
    *_file("stats", "trace stats {f}", "t.csv"),
    *_file("stats-jsonl", "trace stats {f}", "t.jsonl"),
    *_num("stats-", STATS, "--block-tokens", ("-1", "nan", HUGE), T),
    *_num("conv-", CONV, "--block-tokens", ("-1", "0"), T),
    ("conv-window-inf", f"{CONV} --window 0 inf", T, "--window"),
    ("conv-window-empty", f"{CONV} --window 100 200", T, "[100.0, 200.0)"),
    ("conv-out-devnull", "trace convert t.csv --out /dev/null/o.parquet", T, "/dev/null"),
    ("gen-sessions-huge", f"{GEN} --sessions 1000000000000", {}, "too large"),
    *_num("gen-", GEN, "--rate", ("x",)),
    *_num("gen-", GEN, "--block-tokens", (HUGE,)),
    *_num("gen-", GEN, "--system-prompt-tokens", ("nan",)),
    ("gen-system-huge", f"{GEN} --system-prompt-tokens 1000000000000", {}, "too large"),
    *_file("gen-arrivals", f"{GEN} --arrivals-from {{f}}", "a.csv"),
    # --- trace capture / fit (checked before the model loads)
    *_num("cap-", CAP, "--context", NEG_ZERO_NAN),
    *_num("cap-", CAP, "--steps", ("-1", "0")),
    *_num("cap-", CAP, "--sparsity", ("-1", "0", "2", "nan")),
    *_num("cap-", CAP, "--sinks", ("-1", "nan")),
    *_num("cap-", CAP, "--window", ("-1", "nan")),
    *_num("cap-", CAP, "--chunk", ("-1", "0")),
    *_num("cap-", CAP, "--threads", ("-1", "nan")),
    *_num("cap-", CAP, "--text-offset", ("-1", "nan")),
    *_file("cap-text", f"{CAP} --text {{f}}", "t.txt"),
    ("cap-out-devnull", "trace capture --out /dev/null/c.parquet --steps 1", {}, "/dev/null"),
    *_file("fit", "trace fit {f}", "a.parquet"),
    *_num("fit-", FIT, "--passes", ("-1", "0", "nan")),
    *_num("fit-", FIT, "--seeds", ("-1", "0", "nan")),
    ("fit-preset", f"{FIT} --preset nope", {}, "nope"),
    ("fit-out-devnull", f"{FIT} --out /dev/null/x.json", {}, "/dev/null"),
]
