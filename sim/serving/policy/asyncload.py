"""AsyncKV's two legs: storage -> host memory at arrival, host -> GPU in the forward pass.

LMCache's asynchronous KV loading (seed 004 §II-B2: "issues retrieval requests
as soon as a new request arrives and leverages the queuing period") is a
*prefetch into host memory*: ``StorageManager.async_lookup_and_prefetch``
(lmcache/v1/storage_backend/storage_manager.py, v0.3.x) looks the chunks up
in every backend and runs each backend's ``batched_get_non_blocking``, which
brings disk-resident chunks into ``LocalCPUBackend``'s pinned buffers; the
scheduler learns the loadable length when that ends
(``prefetch_all_done_callback``).  The copy to the GPU is the ordinary
retrieval of the forward pass (``retrieve_layer`` with layer-wise
pipelining: per layer, ``layerwise_batched_get`` then the layer's
host-to-GPU copy), so it still overlaps the compute layer by layer.

:func:`split_prefetch` splits a load's pieces accordingly: an SSD piece
becomes a read into its bounce-buffer host-memory module (the arrival leg)
and a copy from that module to the GPU (the forward-pass leg); a
host-memory piece is all forward-pass leg (nothing to prefetch: it is
already in host memory).  With GPUDirect there is no host leg, and the
design keeps its one-leg load (:class:`sim.serving.execute.engine.Engine`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from sim.serving.policy.jobs import Piece


def split_prefetch(
    pieces: Sequence[Piece], ssds: Collection[str], bounce: Mapping[str, str], gpu: str
) -> tuple[list[Piece], list[Piece]]:
    """(arrival-leg pieces: SSD -> host memory, forward-pass pieces: host
    memory -> GPU) of a load's ``pieces``, each list in the load's order."""
    arrival: list[Piece] = []
    forward: list[Piece] = []
    for p in pieces:
        if p.src in ssds and p.dst == gpu:
            host = bounce[p.src]
            arrival.append(Piece(p.src, host, p.nbytes, p.layer, p.extents, p.length))
            forward.append(Piece(host, gpu, p.nbytes, p.layer))
        else:
            forward.append(p)
    return arrival, forward
