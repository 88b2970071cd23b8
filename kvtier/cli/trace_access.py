"""The flags and printing of ``kvtier trace capture`` (an access trace from a real
model, :mod:`traces.capture`) and ``kvtier trace fit`` (the generator fitted to one,
:mod:`traces.fit`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from kvtier.contracts.console import make_console
from kvtier.contracts.validate import check_out_file, float_arg, int_arg
from traces import attention_stats as st
from traces.access import read_access_trace, write_access_trace
from traces.capture import (
    MODEL_NAME,
    CaptureParams,
    capture,
    load_model,
    load_text,
    vectors_path,
    write_vectors,
)
from traces.errors import TraceError
from traces.fit import compare, fit, generated_stats, loss, real_targets
from traces.generator import PRESETS


def add_capture(group: argparse._SubParsersAction) -> None:
    p = group.add_parser(
        "capture", help="capture an access trace from SmolLM2-135M on real text (CPU, PyTorch)"
    )
    p.add_argument("--out", required=True, type=Path, help="output .parquet access trace")
    p.add_argument("--text", type=Path, help="UTF-8 text file (default: pydoc_data.topics)")
    p.add_argument(
        "--text-offset", type=int_arg(0), default=0, help="characters skipped (default 0)"
    )
    p.add_argument(
        "--context", type=int_arg(1), default=2048, help="prefix tokens N (default 2048)"
    )
    p.add_argument("--steps", type=int_arg(1), default=256, help="decode steps (default 256)")
    p.add_argument(
        "--sparsity",
        type=float_arg(0.0, strict=True),
        default=0.1,
        help="top-k fraction (default 0.1)",
    )
    p.add_argument("--sinks", type=int_arg(0), default=4, help="sink tokens (default 4)")
    p.add_argument("--window", type=int_arg(0), default=64, help="local window (default 64)")
    p.add_argument(
        "--chunk", type=int_arg(1), default=512, help="prefill chunk tokens (default 512)"
    )
    p.add_argument("--threads", type=int_arg(0), default=0, help="torch CPU threads (0 = torch's)")
    p.add_argument(
        "--keep-vectors", action="store_true", help="also write keys and queries (.vectors.npz)"
    )
    p.set_defaults(handler=capture_command)


def capture_command(args: argparse.Namespace) -> int:
    from rich import progress as rp  # noqa: PLC0415

    params = CaptureParams(
        context_tokens=args.context, steps=args.steps, sparsity=args.sparsity,
        sink_tokens=args.sinks, local_window=args.window, chunk=args.chunk,
        text_offset=args.text_offset,
    )  # fmt: skip
    check_out_file(args.out)
    params.check(model_context=sys.maxsize)  # the values, before the model loads
    text, name = load_text(args.text)
    if not 0 <= args.text_offset < len(text):  # before the model loads
        where = args.text or "the default text"
        raise TraceError(
            f"capture: --text-offset {args.text_offset} outside {where} ({len(text)} characters)"
        )
    console = make_console()
    t0 = time.perf_counter()
    model, tok = load_model()
    if args.threads > 0:
        import torch  # noqa: PLC0415

        torch.set_num_threads(args.threads)
    params.check(model.cfg.context)
    ids = tok.encode(text[args.text_offset :][: 12 * (params.context_tokens + params.steps + 1)])
    source = f"capture:{MODEL_NAME}:{name}@{args.text_offset}"
    cols = (
        rp.TextColumn("capture"),
        rp.BarColumn(),
        rp.MofNCompleteColumn(),
        rp.TextColumn("tokens"),
    )
    with rp.Progress(*cols, rp.TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("capture", total=params.context_tokens + params.steps)
        cap = capture(model, ids, params, args.keep_vectors,
                      lambda k: bar.advance(task, k), source)  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)  # check_out_file: it may not exist yet
    write_access_trace(cap.trace, args.out)
    size = args.out.stat().st_size
    if args.keep_vectors:
        write_vectors(vectors_path(args.out), cap.keys, cap.queries)
        size += vectors_path(args.out).stat().st_size
    m = cap.trace.meta
    console.print(
        f"{args.out}: {m.steps} steps x {m.layers} layers x {m.kv_heads} KV heads from {source}; "
        f"perplexity {cap.perplexity:.2f}; {size / 2**20:.1f} MiB; "
        f"{time.perf_counter() - t0:.1f} s"
    )
    return 0


def add_fit(group: argparse._SubParsersAction) -> None:
    p = group.add_parser("fit", help="fit the access-trace generator to a captured trace")
    p.add_argument("trace", type=Path, metavar="TRACE", help="a captured access trace (.parquet)")
    p.add_argument("--preset", help="compare this generator preset instead of fitting")
    p.add_argument(
        "--passes", type=int_arg(1), default=2, help="coordinate-descent passes (default 2)"
    )
    p.add_argument("--seeds", type=int_arg(1), default=2, help="generated heads per evaluation")
    p.add_argument("--out", type=Path, help="write the fitted parameters and the table (JSON)")
    p.set_defaults(handler=fit_command)


def fit_command(args: argparse.Namespace) -> int:
    console = make_console()
    if args.preset is not None and args.preset not in PRESETS:
        raise TraceError(f"--preset {args.preset!r}: unknown (known: {', '.join(PRESETS)})")
    if args.out:
        check_out_file(args.out)  # before the fit, not after it
    trace = read_access_trace(args.trace)
    with console.status("statistics of the real trace"):
        real_df = st.per_head(trace)
    real = real_targets(real_df)
    if args.preset:
        params, name = PRESETS[args.preset], args.preset
    else:
        params, _ = fit(trace, real, args.passes, args.seeds, log=console.print)
        name = "fitted"
    gen_df = generated_stats(params, trace, args.seeds)
    table = compare(real_df, gen_df)
    console.print(f"{name}: {params}")
    console.print(f"loss {loss(real, real_targets(gen_df)):.4f}")
    console.print(table.round(4).to_string())
    if args.out:
        doc = {"params": dataclasses.asdict(params), "source": trace.meta.source,
               "table": json.loads(table.to_json(orient="index"))}  # fmt: skip
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1))
    return 0
