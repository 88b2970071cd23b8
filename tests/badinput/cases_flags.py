"""Bad-input cases: flag values, `real validate` flags and sweep factors."""

from __future__ import annotations

from tests.badinput.builders import CONV, GEN, VALIDATE, VIDUR, Files, plan

CEIL = "trace ceilings t.csv"
ONE_ROW: Files = {"t.csv": VIDUR + "1,2,3\n"}
MOONCAKE_ROW: Files = {
    "m.jsonl": '{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}\n'
}

FLAGS: list[tuple[str, str, Files, str]] = [
    # --- flag values: negative, zero, non-finite, fractional, not a number, unknown choice
    *[
        (f"sim-steps-{v}", f"sim --steps {v}", {}, "--steps")
        for v in ("0", "-1", "1.5", "nan", "inf", "x")
    ],
    *[(f"sim-seed-{v}", f"sim --seed {v}", {}, "--seed") for v in ("-1", "1.5", "x", "inf")],
    *[
        (f"sweep-jobs-{v}", f"sweep --factor ssds=1 --jobs {v}", {}, "--jobs")
        for v in ("0", "-2", "1.5")
    ],
    *[
        (f"sweep-steps-{v}", f"sweep --factor ssds=1 --steps {v}", {}, "--steps")
        for v in ("0", "nan")
    ],
    *[
        (f"gen-sessions-{v}", f"{GEN} --sessions {v}", {}, "--sessions")
        for v in ("0", "-1", "1.5", "nan")
    ],
    *[(f"gen-rate-{v}", f"{GEN} --rate {v}", {}, "--rate") for v in ("0", "-1", "inf", "nan")],
    *[(f"gen-think-{v}", f"{GEN} --think-s {v}", {}, "--think-s") for v in ("-1", "nan", "inf")],
    ("gen-seed-neg", f"{GEN} --seed -1", {}, "--seed"),
    *[
        (f"gen-block-{v}", f"{GEN} --block-tokens {v}", {}, "--block-tokens")
        for v in ("0", "-5", "2.5")
    ],
    ("gen-system-neg", f"{GEN} --system-prompt-tokens -1", {}, "--system-prompt-tokens"),
    *[
        (f"conv-scale-{v}", f"{CONV} --scale-rate {v}", {}, "--scale-rate")
        for v in ("0", "-1", "nan")
    ],
    ("conv-window-nan", f"{CONV} --window nan 5", {}, "--window"),
    ("conv-window-neg", f"{CONV} --window -1 5", {}, "--window"),
    ("conv-window-reversed", f"{CONV} --window 5 1", {"t.csv": VIDUR + "1,2,3\n"}, "--window"),
    ("stats-block-0", "trace stats t.csv --block-tokens 0", {}, "--block-tokens"),
    ("stats-format", "trace stats t.csv --format bogus", {}, "--format"),
    ("profiles-action", "profiles bogus", {}, "action"),
    ("models-action", "models bogus", {}, "action"),
    ("command", "bogus", {}, "bogus"),
    ("sim-unknown-flag", "sim --bogus", {}, "--bogus"),
    ("sweep-no-factor", "sweep", {}, "--factor"),
    ("conv-no-out", "trace convert t.csv", {}, "--out"),
    # --- trace ceilings: capacities, the engine block, the model a GiB capacity needs
    ("ceilings-no-capacity", CEIL, ONE_ROW, "--capacity-blocks"),
    ("ceilings-gib-no-model", f"{CEIL} --capacity-gib 1", ONE_ROW, "--model"),
    *[
        (f"ceilings-blocks-{v}", f"{CEIL} --capacity-blocks {v}", {}, "--capacity-blocks")
        for v in ("-1", "1.5", "x")
    ],
    ("ceilings-gib-nan", f"{CEIL} --capacity-gib nan --model m", {}, "--capacity-gib"),
    ("ceilings-block-0", f"{CEIL} --block 0 --capacity-blocks 1", {}, "--block"),
    (
        "ceilings-block-nest",
        "trace ceilings m.jsonl --block 48 --capacity-blocks 1",
        MOONCAKE_ROW,
        "--block",
    ),  # fmt: skip
    # --- real validate (parsed before any I/O)
    *[
        (f"validate-{flag[2:]}-{v}", f"{VALIDATE} {flag} {v}", {}, flag)
        for flag, values in (
            ("--steps", ("0", "1.5")),
            ("--n", ("0", "-1")),
            ("--step-s", ("-1", "0", "nan")),
            ("--scale", ("0", "nan", "2")),
            ("--seed", ("-1",)),
            ("--regimes", ("bogus", ",")),
            ("--design-repeats", ("0", "1.5")),
            ("--serving-requests", ("0", "-2")),
        )
        for v in values
    ],
    ("replay-seed-neg", "real replay --plan p --targets-dir t --out o --seed -1", {}, "--seed"),
    ("replay-engine", "real replay --plan p --targets-dir t --out o --engine x", {}, "--engine"),
    ("validate-engine", f"{VALIDATE} --engine bogus", {}, "--engine"),
    ("validate-serving", f"{VALIDATE} --serving bogus", {}, "--serving bogus: no such serving"),
    ("replay-qd-zero", "real replay --plan p --targets-dir t --out o --qd 0", {}, "--qd"),
    # --- sweep factors, typed per factor
    ("factor-ssds-neg", "sweep --factor ssds --values -1", {}, "ssds"),
    ("factor-batch-frac", "sweep --factor batch --values 1.5", {}, "batch"),
    ("factor-batch-zero", "sweep --factor batch=0", {}, "batch"),
    ("factor-context-zero", "sweep --factor context_tokens --values 0", {}, "context_tokens"),
    ("factor-sparsity-big", "sweep --factor sparsity=2", {}, "sparsity"),
    ("factor-gds-word", "sweep --scenario tiers --factor gds=maybe", {}, "gds"),
    ("factor-unknown", "sweep --factor bogus=1,2", {}, "bogus"),
    ("factor-twice", "sweep --factor ssds=1 --factor ssds=2", {}, "ssds"),
    ("factor-values-two", "sweep --factor ssds --factor batch --values 1", {}, "--values"),
    ("factor-no-values", "sweep --factor ssds", {}, "ssds"),
    ("factor-hw-unknown", "sweep --factor hw=nope", {}, "nope"),
    ("factor-steps-nan", "sweep --factor steps=.nan", {}, "steps"),
    # --- where many runs go (sweep and plan share the flags): an unknown executor, an
    # address no Ray cluster answers at (port 1: refused), contradictory flags
    *[
        (f"{cmd}-executor-unknown", f"{cmd} {arg} --executor dask", {}, "--executor")
        for cmd, arg in (("sweep", "--factor ssds=1"), ("plan", ""))
    ],
    *[
        (f"{cmd}-address-{why}", f"{cmd} {arg} {flags}", {}, needle)
        for cmd, arg in (("sweep", "--factor ssds=1"), ("plan", ""))
        for why, flags, needle in (
            ("refused", "--executor ray --address 127.0.0.1:1", "--address"),
            ("no-port", "--executor ray --address head", "--address"),
            ("without-ray", "--address 127.0.0.1:1", "--address"),
            ("with-jobs", "--executor ray --address 127.0.0.1:1 --jobs 2", "--jobs"),
        )
    ],
    # --- kvtier lab (make lab): checked before JupyterLab is looked for
    ("lab-results-file", "lab --results f", {"f": "x"}, "--results"),
    ("lab-traces-file", "lab --traces f.parquet", {"f.parquet": "x"}, "--traces"),
    ("lab-port-neg", "lab --port -1", {}, "--port"),
    # --- a factor value beyond the profile: refused, not its variants dropped from the table
    ("factor-ssds-over-profile", "sweep --scenario tiers --factor ssds=1,16", {}, "factor ssds"),
    (
        "factor-hw-too-small",
        "sweep --scenario tiers --factor hw=h20-8ssd,h100-2dimm-2ssd",
        {},
        "hw=h100-2dimm-2ssd",
    ),
    ("factor-tp-over-profile", "sweep --scenario unified-pooling --factor tp=64", {}, "factor tp"),
    (
        "factor-qd-int32",
        "sweep --scenario tiers --factor queue_depth=10000000000",
        {},
        "queue_depth",
    ),
    # --- contradictory flags: refused with both named, not one silently ignored
    (
        "sim-plan-and-scenario",
        "sim --plan p.parquet --scenario tiers",
        {"p.parquet": plan()},
        "--plan p.parquet and --scenario",
    ),
    ("sim-plan-and-steps", "sim --plan p.parquet --steps 2", {"p.parquet": plan()}, "--steps"),
    ("sim-plan-and-seed", "sim --plan p.parquet --seed 2", {"p.parquet": plan()}, "--seed"),
    (
        "sweep-hw-and-factor-hw",
        "sweep --hw h20-8ssd --factor hw=h20-8ssd-900p",
        {},
        "--hw h20-8ssd and --factor hw",
    ),
    # --- huge sizes: the flags named, before memory runs out
    ("bench-steps-huge", "bench --steps 1000000000000", {}, "--steps 1000000000000"),
    ("bench-layers-huge", "bench --steps 1 --layers 1000000000000", {}, "--layers 1000000000000"),
    (
        "bench-serving-requests-huge",
        "bench-serving --requests 1000000000000 --designs gpu-only --blocks 256",
        {},
        "--requests 1000000000000",
    ),
    (
        "bench-serving-block-over-gpu",
        "bench-serving --requests 2 --designs gpu-only --blocks 1073741824",
        {},
        "--blocks 1073741824",
    ),
    (
        "plan-measured-uncovered-gpu",
        "plan --base h20-8ssd --gpu-time measured",
        {},
        "--gpu-time measured: NVIDIA H20 is not in aiconfigurator-core 0.12.0's systems",
    ),
    (
        "plan-framework-version",
        "plan --base dgx-h100 --gpu-time measured --framework-version 0.13.0",
        {},
        "--framework-version vllm 0.13.0 is not in",
    ),
    (
        "plan-measured-tp-moe",
        "plan --base dgx-h100 --model Qwen3-30B-A3B --gpu-time measured --gpus 1,2",
        {},
        "--gpu-time measured: aiconfigurator-core 0.12.0 folds Qwen3-30B-A3B's MoE all-reduces",
    ),
    ("plan-gpu-time-choice", "plan --gpu-time exact", {}, "--gpu-time"),
    (
        "plan-context-over-model",
        "plan --base h100-2dimm-2ssd --trace long_doc --context-tokens 1000000000000 --no-prune",
        {},
        "--context-tokens 1000000000000",
    ),
    (
        "plan-docs-huge",
        "plan --base h100-2dimm-2ssd --trace long_doc --docs 1000000000000 --no-prune",
        {},
        "--docs 1000000000000",
    ),
    (
        "plan-load-low-high",
        "plan --trace conversation --max-load --load-low 2 --load-high 1",
        {},
        "--load-low 2.0: must be below --load-high 1.0",
    ),
    ("plan-load-tol-0", "plan --trace conversation --max-load --load-tol 0", {}, "--load-tol"),
    (
        "plan-load-probes-1",
        "plan --trace conversation --max-load --load-probes 1",
        {},
        "--load-probes",
    ),
    ("plan-load-long-doc", "plan --max-load", {}, "--max-load: --trace long_doc"),
    (
        "plan-replicas-tp",
        "plan --trace conversation --base h20-8ssd --replicas 2 --gpus 1,2",
        {},
        "--replicas: one GPU an instance",
    ),
    (
        "plan-replicas-long-doc",
        "plan --base h20-8ssd --replicas 2",
        {},
        "--replicas: --trace long_doc",
    ),
    (
        "plan-router-unknown",
        "plan --trace conversation --replicas 1 --router fastest",
        {},
        "--router fastest",
    ),
    ("plan-replicas-over-gpus", "plan --trace conversation --replicas 2", {}, "--replicas: 2 GPUs"),
    # --- a plan over several bases (machine kinds): each named once, each known, and a grid
    # of which some point can run (each refused before any simulation)
    ("plan-base-unknown", "plan --base h20-8ssd,h21-8ssd", {}, "--base h21-8ssd: unknown"),
    ("plan-base-twice", "plan --base h20-8ssd,l20-server,h20-8ssd", {}, "--base: h20-8ssd and"),
    ("plan-base-empty", "plan --base ,", {}, "--base: empty list"),
    ("plan-gpus-empty", "plan --gpus ,", {}, "--gpus: empty list"),
    (
        "plan-no-candidate",  # 70B's 131.4 GiB of weights on one RTX 4090 or one L20
        "plan --base rtx4090-ws,l20-server --model Llama-3.1-70B --gpus 1",
        {},
        "no candidate of the grid can run: rtx4090-ws: weights do not fit",
    ),
    (
        "plan-gpus-over-every-base",
        "plan --base rtx4090-ws,l20-server --gpus 1,2",
        {},
        "--gpus: 2 GPUs asked of rtx4090-ws, l20-server, which have at most 1",
    ),
    ("validate-n-over-profile", f"{VALIDATE} --n 16", {}, "--n 16: --hw h20-8ssd has 8 SSDs"),
    # 4 regimes x (1 warm-up + 10^12 steps) x 4 SSDs = 16,000,000,000,016 ops
    ("validate-steps-huge", f"{VALIDATE} --steps 1e12", {}, "plan of 16,000,000,000,016 ops"),
    # --- a derived machine beyond one host: refused before any is derived or priced
    ("plan-ssd-counts-huge", "plan --ssd-counts 1,1000000", {}, "--ssd-counts 1000000: at most 40"),
    ("plan-ssd-counts-41", "plan --ssd-counts 41", {}, "--ssd-counts 41: at most 40"),
    ("plan-dram-modules-huge", "plan --dram-modules 1000000", {}, "--dram-modules 1000000"),
    ("plan-dram-modules-49", "plan --dram-modules 49", {}, "--dram-modules 49: at most 48"),
    ("plan-dram-gib-huge", "plan --dram-gib 64,1e300", {}, "--dram-gib 1e+300: at most 12,288"),
]
