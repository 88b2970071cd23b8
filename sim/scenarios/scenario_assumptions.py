"""Numbers the seed scenarios assume where their seed gives none, each with its range.

Registered on their workload kind as :class:`sim.registry.WorkloadAssumption`, at the
value the scenarios set (``at``): a sensitivity run varies one only where a scenario
(or a variant) sets exactly that value; a scenario with another value has made its
own choice (docs/sensitivity.md, "Assumptions as data").

* KVDrive's pinned buffer, ``pinned_mb`` 4000 (kvdrive*.yaml): seed 003 sizes the
  balanced coordination's pinned memory by offline profiling and gives no figure
  (§7.3 (d), §8).
* The KVDrive hosts' reserved memory, ``host_reserved_gb`` 8 (kvdrive*.yaml): what the
  OS, the CUDA runtime and the staging buffers keep out of the equal host budget
  (seed 003 §9.1 gives the DRAM only).
* SwiftCache's LWM trace bound, ``max_context`` 64000 (swiftcache-lwm.yaml): seed 002
  selects LWM requests "with lengths greater than 20K, with no upper limit" (§5.1);
  a trace needs a bound, and ShareGPT has 1% of its sessions above 56K (§2.2 Fig. 3b).
* SwiftCache's NVLink copies hold ``copy_sm_share`` 0.205 of each endpoint GPU's SMs
  (swiftcache*.yaml; :class:`sim.serving.execute.multi.PeerHbm`): seed 002 copies KV
  with torch.distributed (§4), i.e. NCCL send/recv, whose kernels run one CTA per
  channel, never sharing an SM with another kernel (NVIDIA/nccl issues 689, 1098); to
  an NVLink peer NCCL opens 2 channels per link (src/graph/paths.cc
  ``ncclTopoGetNchannels``: 2 x path bandwidth / SM90_NVLINK_BW, src/graph/topo.h), so
  the seed's 400 GB/s bidirectional (8 NVLink4 links of 50 GB/s) gives 16 CTAs, of
  the H20's 78 SMs (Geekbench 6 listing): 16 / 78 = 0.205.  The seed names neither
  its NCCL settings nor its link count: 0 (a copy-engine transfer, cudaMemcpyPeer)
  to 32 / 78 = 0.41 (the H20's 18 links, 36 channels, NCCL's 32 p2p channels).
"""

from __future__ import annotations

from sim.registry import WorkloadAssumption

PINNED_MB = 4000.0
"""The pinned buffer the KVDrive scenarios assume, MB."""
HOST_RESERVED_GB = 8.0
"""The host memory the KVDrive scenarios keep out of the budget, GB."""
LWM_MAX_CONTEXT = 64000
"""The upper bound of swiftcache-lwm's LWM requests, tokens."""

PINNED = WorkloadAssumption(
    "pinned_mb",
    PINNED_MB / 2,
    PINNED_MB * 2,
    "assumption: seed 003 sizes the pinned buffer by offline profiling and gives no "
    "figure (§7.3 (d), §8); half to twice the 4 GB the scenarios take",
    lambda p, profile: p.pinned_mb,
    at=PINNED_MB,
)
HOST_RESERVED = WorkloadAssumption(
    "host_reserved_gb",
    4.0,
    16.0,
    "assumption: seed 003 §9.1 gives the DRAM only; 4 GB (a lean OS and one CUDA "
    "context) to 16 GB (with the serving process, page cache and staging buffers)",
    lambda p, profile: p.host_reserved_gb,
    at=HOST_RESERVED_GB,
)
LWM_BOUND = WorkloadAssumption(
    "max_context",
    48000,
    128000,
    "assumption: seed 002 §5.1 sets no upper length for LWM requests; ShareGPT has 1% "
    "of sessions above 56K (§2.2 Fig. 3b): 48K to 128K",
    lambda p, profile: p.max_context,
    at=LWM_MAX_CONTEXT,
)
COPY_SM_SHARE = 0.205
"""The share of an H20's SMs a SwiftCache NVLink copy's NCCL kernels hold, each end."""
COPY_SM = WorkloadAssumption(
    "copy_sm_share",
    0.0,
    0.41,
    "NCCL send/recv (seed 002 §4: torch.distributed) holds one SM per channel, 2 channels "
    "per NVLink link (NCCL src/graph/paths.cc): 16 CTAs of the H20's 78 SMs at the seed's "
    "400 GB/s; 0 (copy engines) to 32 of 78 (18 links, NCCL's 32 p2p channels)",
    lambda p, profile: p.copy_sm_share,
    at=COPY_SM_SHARE,
)
KVDRIVE = (PINNED, HOST_RESERVED)
"""The kvdrive kind's scenario assumptions."""
SERVING = (LWM_BOUND, COPY_SM)
"""The serving kind's scenario assumptions."""
