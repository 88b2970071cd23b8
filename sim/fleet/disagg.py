"""Prefill/decode disaggregation: P prefill and D decode instances, one flow network.

The mechanism, as NVIDIA Dynamo's disaggregated serving runs it (design doc
"Dynamo Disaggregation", docs.nvidia.com/dynamo design-docs/disaggregated-serving;
architecture flow S3-S8): the router picks a prefill worker, which computes the
prompt's KV; the router then picks a decode worker, which fetches that KV
"directly from the VRAM of the prefill engine to the VRAM of the decode engine"
(NIXL) without blocking either engine's forward passes, and decodes.  Mooncake
(Qin et al., FAST'25) separates the same two pools.  Here:

* **Prefill** (:class:`Disaggregated`, the workload's ``router`` over the prefill
  instances): a copy of the request with one output token (vLLM's prefill side
  of P/D runs with ``max_tokens`` 1), served like any routed request.  Its
  first token is the request's first token: TTFT ends at the prefill (the
  choice this module makes: the prefill's token is the first the client can
  get; a deployment streaming only from the decode worker would add the
  transfer and the decode's first step, both in the records).
* **Hand-off**: when the prefill finishes, the decode router (its own policy
  over the decode instances; by default Dynamo's KV router with the overlap
  term off, as Dynamo's decode stage runs it: ``overlap_score_weight`` 0)
  releases the request into a decode engine with ``remote`` = the prefill's GPU.
* **KV transfer** (:meth:`Engine._fetch`): at the decode engine's admission,
  when its blocks are allocated, the prompt's blocks that the decode GPU does
  not already hold are copied from the prefill GPU in ONE transfer of
  ``blocks x block_tokens x kv_bytes_per_token_layer x layers`` bytes (vLLM's
  NixlConnector reads the blocks after the prefill has ended; Mooncake's
  layer-wise streaming during the prefill is not modelled).  It is a flow of
  the machine's network: between nodes of a fleet it crosses the prefill
  GPU's PCIe link, its NIC, the fabric, the decode node's NIC and PCIe
  (:mod:`hwprofiles.fleet`), sharing each with every other flow.  The op is in
  the decode instance's records (``tag`` ``kv_transfer``, ``step`` = the
  request id).  The request waits parked meanwhile, then decodes its
  remaining ``output_tokens - 1`` tokens.
* **The prefill's blocks** stay taken after its finish until the decode
  instance's fetch has landed (vLLM's NixlConnector ``request_finished``
  returns ``delay_free_blocks``: "It will be read from D upon completion"),
  then are freed into the prefill instance's prefix cache
  (:meth:`Engine.release_held`): a slow network holds prefill memory longer.
* **Not modelled**: Dynamo's conditional local prefill on the decode worker;
  the NixlConnector's lease timeout; the control messages.

:func:`disagg_records` joins the instances' records into one row per request:
the prefill's release, admission and first token, the decode's finish, the
output length of the original request; TPOT is the client's (first token to
last over the tokens after the first, the transfer included).
:func:`handoffs` gives each request's hand-off times, and the decode-side TPOT.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import simpy

from hwprofiles import HardwareProfile
from sim.fleet.routed import Router, fleet_records, run_engines
from sim.fleet.router import RouterPolicy
from sim.serving.execute.engine import Engine
from sim.serving.execute.multi import Instance, build_instances
from sim.serving.metrics import REQUEST_RECORD_SCHEMA, RequestLog, ServingRecords
from sim.serving.requests import Request


class Disaggregated(Router):
    """Each request prefilled on an instance ``policy`` picks among ``prefill``,
    then decoded on one ``decode_policy`` picks among ``decode`` (module docstring)."""

    def __init__(
        self,
        prefill: Sequence[Engine],
        decode: Sequence[Engine],
        policy: RouterPolicy,
        decode_policy: RouterPolicy,
        requests: list[Request],
    ):
        super().__init__(prefill, policy, requests)
        # its ``left``: hand-offs still to come (one per request, made or skipped)
        self.decoder = Router(decode, decode_policy, requests)
        self.prefill_end: dict[int, float] = {}  # rid -> when its prefill finished
        self.source: dict[int, Engine] = {}  # rid -> the prefill engine holding its blocks

    def start(self) -> None:
        self.decoder.watch()
        for e in self.decoder.engines:
            e.on_fetched.append(lambda s: self._read(s.req.rid))
        super().start()
        if not self.requests:
            self.decoder._close()

    def send(self, r: Request) -> simpy.Event:
        """Prefill ``r`` now; the event fires when its last token is out."""
        i, s = self.route(dataclasses.replace(r, output_tokens=1), hold=True)
        engine, done = self.engines[i], self.env.event()

        def prefilled(_e) -> None:
            self.prefill_end[r.rid] = self.env.now
            if engine.log.rejected[engine.row[s]] or r.output_tokens <= 1:
                if r.rid in engine.held:  # nothing will read them
                    engine.release_held(r.rid)
                self._skip()
                done.succeed()
                return
            self.source[r.rid] = engine
            j, ds = self.decoder.route(r, remote=engine.cfg.gpu)
            ended = self.decoder.engines[j].finished[ds]
            if ended.triggered:  # rejected on release: nothing will read them
                self._read(r.rid)
            ended.callbacks.append(lambda _e: done.succeed())

        engine.finished[s].callbacks.append(prefilled)
        return done

    def _read(self, rid: int) -> None:
        """``rid``'s KV has been read (or never will be): its prefill blocks go."""
        engine = self.source.pop(rid, None)
        if engine is not None:
            engine.release_held(rid)

    def _skip(self) -> None:
        """A request that needs no decode instance (rejected, or one token)."""
        self.decoder.left -= 1
        if not self.decoder.left:
            self.decoder._close()


def run_disagg(
    profile: HardwareProfile,
    prefill: Sequence[Instance],
    decode: Sequence[Instance],
    requests: list[Request],
    policy: RouterPolicy,
    decode_policy: RouterPolicy,
) -> tuple[dict[str, ServingRecords], Disaggregated]:
    """Serve ``requests`` disaggregated (all instances solo, built without
    requests); each instance's records by name, and the router (its ``routed``
    and ``decoder.routed``: each request's prefill and decode instance index)."""
    instances = [*prefill, *decode]
    if any(i.requests or i.preload or i.role != "solo" for i in instances):
        raise ValueError("disaggregated instances are solo and get their requests from the router")
    engines = build_instances(profile, instances)
    for e in engines:
        if e.cfg.max_inflight:
            raise ValueError("max_inflight: a routed run's client is open loop")
        e.log = RequestLog(len(requests))
    router = Disaggregated(engines[: len(prefill)], engines[len(prefill) :], policy,
                           decode_policy, requests)  # fmt: skip
    return run_engines(router, instances, engines), router


def disagg_records(
    prefill: Sequence[ServingRecords], decode: Sequence[ServingRecords], requests: list[Request]
) -> ServingRecords:
    """One run's records: every instance's ops and plans (:func:`fleet_records`),
    and one request row per request joining its prefill and decode rows
    (module docstring)."""
    joined = fleet_records([*prefill, *decode])
    p = _rows(prefill).set_index("request_id")
    d = _rows(decode).set_index("request_id")
    out = {r.rid: r.output_tokens for r in requests}
    p["output_tokens"] = p.index.map(out).astype(np.int64)
    both = p.index.intersection(d.index)
    p.loc[both, "finish_s"] = d.loc[both, "finish_s"]
    p.loc[both, "rejected"] = p.loc[both, "rejected"] | d.loc[both, "rejected"]
    p.loc[both, "blocked_io_s"] = p.loc[both, "blocked_io_s"] + d.loc[both, "blocked_io_s"]
    n = p["output_tokens"]
    p["tpot_s"] = np.where(
        n > 1, (p["finish_s"] - p["first_token_s"]) / np.maximum(n - 1, 1), np.nan
    )
    p = p.reset_index()
    table = pa.Table.from_arrays(
        [pa.array(p[f.name].to_numpy(), type=f.type) for f in REQUEST_RECORD_SCHEMA],
        schema=REQUEST_RECORD_SCHEMA,
    )
    return dataclasses.replace(joined, requests=table)


def _rows(records: Sequence[ServingRecords]) -> pd.DataFrame:
    tables = [r.requests for r in records if r.requests is not None and r.requests.num_rows]
    if not tables:
        return pd.DataFrame({f.name: pd.Series(dtype=object) for f in REQUEST_RECORD_SCHEMA})
    return pa.concat_tables(tables).to_pandas()


def handoffs(decode: Sequence[ServingRecords], router: Disaggregated) -> pd.DataFrame:
    """Per decoded request: its prefill's end, its release and admission on the
    decode instance, its KV transfer (start, end, bytes) and the decode-side TPOT
    (its tokens after the first over the time from the KV's arrival to its end)."""
    rows = _rows(decode)
    ops = pa.concat_tables([r.ops for r in decode]).to_pandas()
    kv = ops[ops["tag"] == "kv_transfer"].set_index("step")
    out = pd.DataFrame({"request_id": rows["request_id"].to_numpy()})
    out["prefill_end_s"] = out["request_id"].map(router.prefill_end)
    out["decode_release_s"] = rows["release_s"].to_numpy()
    out["decode_admit_s"] = rows["admit_s"].to_numpy()
    out["kv_start_s"] = out["request_id"].map(kv["start_s"])
    out["kv_end_s"] = out["request_id"].map(kv["end_s"])
    out["kv_bytes"] = out["request_id"].map(kv["bytes"])
    n = rows["output_tokens"].to_numpy()
    gap = rows["finish_s"].to_numpy() - rows["first_token_s"].to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        out["decode_tpot_s"] = np.where(n > 1, gap / np.maximum(n - 1, 1), np.nan)
    return out
