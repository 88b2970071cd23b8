"""Bad-input cases: profile YAML and scenario YAML."""

from __future__ import annotations

from tests.badinput.builders import (
    PLAN_CMD,
    PRICE_INF,
    PROFILE,
    Files,
    bomb,
    kvdrive,
    profile,
    serving,
    sparse,
    swarm,
)

# a fleet of two shipped 8-GPU nodes (hwprofiles/fleet.py)
FLEET = """name: f
description: x
fleet:
  node_profile: dgx-h100
  nodes: 2
  nic: {model: N, gbps: 50.0, pcie_gbps: 63.0, latency_us: 2.0}
  network: {nodes_per_leaf: 2}
"""

# the same fleet with two storage servers of the server file s.yaml (hwprofiles/fleet.py)
FLEET_STORAGE = (
    FLEET
    + """  storage:
    node_profile: s.yaml
    nodes: 2
    nic: {model: M, gbps: 25.0, pcie_gbps: 31.5, latency_us: 2.0}
"""
)
# a storage server (hwprofiles/schema.py StorageServer): one 64 GiB DRAM module, one SSD
SERVER = """name: s
description: x
dram: [{name: dram0, capacity_gib: 64, gbps: 100.0}]
ssds:
  - {model: S, count: 1, capacity_gib: 1000, read_gbps: 6.4, write_gbps: 3.8, read_iops: 1000000,
     write_iops: 200000, read_latency_us: 80, write_latency_us: 20, max_queue_depth: 128,
     max_io_kib: 1280}
nics: [rc0]
topology:
  switches: [rc0]
  links:
    - {name: dram0.bus, between: [rc0, dram0], gbps: 100.0, kind: membus, duplex: half}
    - {name: ssd0.pcie, between: [ssd0, rc0], gbps: 7.88, kind: pcie}
"""
# ... and one holding no device at all
SERVER_EMPTY = """name: s
description: x
dram: []
ssds: []
nics: [rc0]
topology: {switches: [rc0], links: []}
"""

YAML: list[tuple[str, str, Files, str]] = [
    # --- profile YAML (read by `profiles show FILE`, `sim --hw FILE`, `sweep --hw FILE`)
    ("yaml-latin1", "profiles show p.yaml", {"p.yaml": PROFILE.encode() + b"# caf\xe9\n"}, "UTF-8"),
    ("yaml-utf16", "profiles show p.yaml", {"p.yaml": PROFILE.encode("utf-16")}, "UTF-16"),
    ("yaml-binary", "profiles show p.yaml", {"p.yaml": b"\x00\x01\x02\x03gpu"}, "p.yaml"),
    ("yaml-bomb", "profiles show p.yaml", {"p.yaml": bomb()}, "alias"),
    ("yaml-self-alias", "profiles show p.yaml", {"p.yaml": "a: &x [1, *x]\n"}, "alias"),
    ("yaml-deep", "profiles show p.yaml", {"p.yaml": "a: " + "[" * 3000 + "]" * 3000}, "p.yaml"),
    ("yaml-syntax", "profiles show p.yaml", {"p.yaml": "gpu: [1,\n"}, "invalid YAML"),
    ("yaml-not-mapping", "profiles show p.yaml", {"p.yaml": "- 1\n- 2\n"}, "mapping"),
    ("yaml-missing", "profiles show nope.yaml", {}, "nope.yaml"),
    ("yaml-is-dir", "profiles show d.yaml", {"d.yaml/x": ""}, "d.yaml"),
    (
        "prof-unknown-key",
        "profiles show p.yaml",
        {"p.yaml": profile("  count: 1 ", "  cuont: 1 ")},
        "gpu.cuont",
    ),
    (
        "prof-zero-gbps",
        "profiles show p.yaml",
        {"p.yaml": profile("read_gbps: 14.7", "read_gbps: 0")},
        "read_gbps",
    ),
    (
        "prof-zero-submit-cores",
        "profiles show p.yaml",
        {"p.yaml": profile("  io_submit_cores: 1 ", "  io_submit_cores: 0 ")},
        "io_submit_cores",
    ),
    (
        "prof-fractional-submit-cores",
        "profiles show p.yaml",
        {"p.yaml": profile("  io_submit_cores: 1 ", "  io_submit_cores: 1.5 ")},
        "io_submit_cores",
    ),
    (
        "prof-neg-gbps",
        "profiles show p.yaml",
        {"p.yaml": profile("read_gbps: 14.7", "read_gbps: -1")},
        "read_gbps",
    ),
    (
        "prof-nan-gbps",
        "profiles show p.yaml",
        {"p.yaml": profile("read_gbps: 14.7", "read_gbps: .nan")},
        "read_gbps",
    ),
    (
        "prof-inf-iops",
        "profiles show p.yaml",
        {"p.yaml": profile("read_iops: 1850000", "read_iops: .inf")},
        "read_iops",
    ),
    (
        "prof-str-gbps",
        "profiles show p.yaml",
        {"p.yaml": profile("read_gbps: 14.7", "read_gbps: fast")},
        "read_gbps",
    ),
    (
        "prof-bool-cores",
        "profiles show p.yaml",
        {"p.yaml": profile("cores: 16", "cores: true")},
        "cpu.cores",
    ),
    (
        "prof-frac-count",
        "profiles show p.yaml",
        {"p.yaml": profile("count: 2 ", "count: 2.5 ")},
        "count",
    ),
    (
        "prof-neg-latency",
        "profiles show p.yaml",
        {"p.yaml": profile("read_latency_us: 60", "read_latency_us: -60")},
        "read_latency_us",
    ),
    (
        "prof-tiny-ssd",
        "profiles show p.yaml",
        {"p.yaml": profile("capacity_gib: 1862.6", "capacity_gib: 0.000001")},
        "capacity_gib",
    ),
    (
        "sim-ssd-below-kv",
        "sim --hw p.yaml",
        {"p.yaml": profile("capacity_gib: 1862.6", "capacity_gib: 0.001")},
        "exceeds 2 SSD(s) of mine (0.002 GiB)",
    ),
    (
        "prof-zero-dram",
        "profiles show p.yaml",
        {"p.yaml": profile("capacity_gib: 64,", "capacity_gib: 0,")},
        "capacity_gib",
    ),
    (
        "prof-efficiency",
        "profiles show p.yaml",
        {"p.yaml": profile("pcie: 0.94", "pcie: 1.5")},
        "efficiency.pcie",
    ),
    (
        "prof-assume-low-above-high",
        "profiles show p.yaml",
        {
            "p.yaml": profile(
                "field: efficiency.tensor, low: 0.6, high: 0.85",
                "field: efficiency.tensor, low: 0.9, high: 0.6",
            )
        },
        "assumptions[3].low",
    ),
    (
        "prof-assume-unknown-field",
        "profiles show p.yaml",
        {"p.yaml": profile("field: efficiency.tensor,", "field: efficiency.tensorr,")},
        "assumptions[3].field",
    ),
    (
        "prof-assume-not-a-number",
        "profiles show p.yaml",
        {"p.yaml": profile("field: efficiency.tensor,", "field: gpu.model,")},
        "assumptions[3].field",
    ),
    (
        "prof-assume-outside",
        "profiles show p.yaml",
        {"p.yaml": profile("low: 8.0, high: 21.3", "low: 12.0, high: 21.3")},
        "cpu.core_mem_gbps = 10.65",
    ),
    (
        "prof-assume-fraction",
        "profiles show p.yaml",
        {"p.yaml": profile("low: 0.85, high: 1.0", "low: 0.85, high: 1.2")},
        "assumptions[4].high",
    ),
    (
        "sens-no-assumptions",  # a sparse-decode scenario: no workload assumptions either
        "sim --hw p.yaml --scenario s.yaml --sensitivity --out o",
        {
            "p.yaml": profile("\nassumptions:", "\nunused_assumptions:").split("\nunused_")[0],
            "s.yaml": sparse(),
        },
        "nothing to vary",
    ),
    (
        "sens-unknown",
        "sim --sensitivity --assumptions efficiency.tensr --out o",
        {},
        "--assumptions",
    ),
    ("sens-assume-alone", "sim --assumptions efficiency.tensor --out o", {}, "--assumptions"),
    ("sens-jobs-alone", "sim --jobs 2 --out o", {}, "--jobs"),
    ("sens-sweep-factor", "sweep --sensitivity --factor ssds=1 --out o", {}, "--factor"),
    ("sens-sweep-assume", "sweep --factor ssds=1 --assumptions x --out o", {}, "--assumptions"),
    ("sens-plan", "sim --plan x.parquet --sensitivity --out o", {}, "--sensitivity"),
    (
        "prof-link-kind",
        "profiles show p.yaml",
        {"p.yaml": profile("kind: membus, duplex", "kind: bogus, duplex")},
        "kind",
    ),
    (
        "prof-link-node",
        "profiles show p.yaml",
        {"p.yaml": profile("between: [ssd0, sw0]", "between: [ssd9, sw0]")},
        "between",
    ),
    (
        "prof-duplicate-key",
        "profiles show p.yaml",
        {"p.yaml": profile("  cores: 16", "  cores: 16\n  cores: 8")},
        "cores",
    ),
    (
        "prof-missing-key",
        "profiles show p.yaml",
        {"p.yaml": profile("  bf16_tflops: 756", "")},
        "bf16_tflops",
    ),
    ("sim-hw-latin1", "sim --hw p.yaml", {"p.yaml": b"name: caf\xe9\n"}, "p.yaml"),
    (
        "sweep-hw-tiny",
        "sweep --hw p.yaml --factor ssds=1",
        {"p.yaml": profile("capacity_gib: 1862.6", "capacity_gib: 0.001")},
        "exceeds 1 SSD(s) of mine (0.001 GiB)",
    ),
    # --- scenario YAML
    ("scen-latin1", "sim --scenario s.yaml", {"s.yaml": sparse().encode() + b"# \xe9\n"}, "UTF-8"),
    ("scen-bomb", "sim --scenario s.yaml", {"s.yaml": bomb()}, "alias"),
    ("scen-utf16", "sim --scenario s.yaml", {"s.yaml": sparse().encode("utf-16")}, "UTF-16"),
    ("scen-batch-neg", "sim --scenario s.yaml", {"s.yaml": sparse(batch="-1")}, "batch"),
    ("scen-batch-frac", "sim --scenario s.yaml", {"s.yaml": sparse(batch="1.5")}, "batch"),
    ("scen-sparsity", "sim --scenario s.yaml", {"s.yaml": sparse(sparsity="2")}, "sparsity"),
    ("scen-sparsity-nan", "sim --scenario s.yaml", {"s.yaml": sparse(sparsity=".nan")}, "sparsity"),
    ("scen-steps-frac", "sim --scenario s.yaml", {"s.yaml": sparse(steps="1.5")}, "steps"),
    (
        "scen-context-str",
        "sim --scenario s.yaml",
        {"s.yaml": sparse(context="1e12")},
        "context_tokens",
    ),
    (
        "scen-context-huge",
        "sim --scenario s.yaml --hw h100-2dimm-2ssd",
        {"s.yaml": sparse(context="1.0e+12")},
        "context_tokens",
    ),
    (
        "scen-context-inf",
        "sim --scenario s.yaml",
        {"s.yaml": sparse(context=".inf")},
        "context_tokens",
    ),
    (
        "scen-kvdrive-beyond-context",
        "sim --scenario s.yaml",
        {
            "s.yaml": "name: k\ndescription: x\nseed: 0\nworkload:\n  kind: kvdrive\n"
            "  model: Phi-4-mini\n  context_tokens: 131072\n  batch: 1\n  steps: 1\n"
        },
        "context_tokens: 131,072 tokens + 1 decode steps exceed Phi-4-mini's context",
    ),
    (
        "scen-unknown-key",
        "sim --scenario s.yaml",
        {"s.yaml": sparse() + "  bogus: 1\n"},
        "workload.bogus",
    ),
    (
        "scen-unknown-kind",
        "sim --scenario s.yaml",
        {"s.yaml": sparse() + "  kind: bogus\n"},
        "kind",
    ),
    (
        "scen-variant-key",
        "sim --scenario s.yaml",
        {"s.yaml": sparse() + "variants:\n  - {name: a, bogus: 1}\n"},
        "bogus",
    ),
    (
        "scen-model",
        "sim --scenario s.yaml",
        {"s.yaml": sparse().replace("Llama-3.1-8B", "Nope-1B")},
        "Nope-1B",
    ),
    (
        "serve-doc-huge",
        "sim --scenario v.yaml --hw h100-2dimm-2ssd",
        {"v.yaml": serving("  trace: long_doc\n  context_tokens: 1.0e+12\n  docs: 1\n")},
        "context_tokens",
    ),
    (
        "serve-ssd-gib",
        "sim --scenario v.yaml --hw h100-2dimm-2ssd",
        {"v.yaml": serving("  design: paged-ssd\n  design_params: {ssd_gib: 100000.0}\n")},
        "ssd_gib",
    ),
    (
        "serve-cpu-gib",
        "sim --scenario v.yaml --hw h100-2dimm-2ssd",
        {"v.yaml": serving("  design: paged-cpu-ssd\n  design_params: {cpu_gib: 5000.0}\n")},
        "cpu_gib",
    ),
    ("serve-design", "sim --scenario v.yaml", {"v.yaml": serving("  design: bogus\n")}, "design"),
    ("serve-think", "sim --scenario v.yaml", {"v.yaml": serving("  think_s: -1\n")}, "think_s"),
    (
        "serve-leval-share",
        "sim --scenario v.yaml",
        {"v.yaml": serving("  leval_qa_share: 1.5\n")},
        "leval_qa_share",
    ),
    (
        "serve-leval-share-type",
        "sim --scenario v.yaml",
        {"v.yaml": serving("  leval_qa_share: half\n")},
        "leval_qa_share",
    ),
    (
        "serve-copy-sm-share",
        "sim --scenario v.yaml",
        {"v.yaml": serving("  copy_sm_share: 1.0\n")},
        "copy_sm_share",
    ),
    (
        "serve-copy-sm-share-type",
        "sim --scenario v.yaml",
        {"v.yaml": serving("  copy_sm_share: a quarter\n")},
        "copy_sm_share",
    ),
    (
        "serve-leval-window",
        "sim --scenario v.yaml",
        {"v.yaml": serving("  trace: leval_long\n  context_tokens: 40000\n  max_context: 20000\n")},
        "max_context",
    ),
    (
        "serve-gpu-time",
        "sim --scenario v.yaml",
        {"v.yaml": serving("  gpu_time: exact\n")},
        "gpu_time",
    ),
    ("serve-framework", "sim --scenario v.yaml", {"v.yaml": serving("  framework: tgi\n")}, "tgi"),
    (
        "serve-framework-version",
        "sim --scenario v.yaml --hw dgx-h100",
        {"v.yaml": serving("  gpu_time: measured\n  framework_version: 0.13.0\n")},
        "framework_version: vllm 0.13.0",
    ),
    (
        "serve-measured-uncovered-gpu",
        "sim --scenario v.yaml --hw h20-8ssd",
        {"v.yaml": serving("  gpu_time: measured\n")},
        "gpu_time: measured: NVIDIA H20 is not in aiconfigurator-core 0.12.0's systems",
    ),
    (
        "sparse-measured-uncovered-gpu",
        "sim --scenario v.yaml --hw h20-8ssd",
        {"v.yaml": sparse() + "  gpu_time: measured\n"},
        "gpu_time: measured: NVIDIA H20 is not in aiconfigurator-core 0.12.0's systems",
    ),
    (
        "swarm-framework-version",
        "sim --scenario v.yaml --hw dgx-h100",
        {"v.yaml": swarm("  gpu_time: measured\n  framework_version: 0.13.0\n")},
        "framework_version: vllm 0.13.0",
    ),
    (
        "kvdrive-measured-uncovered-gpu",
        "sim --scenario v.yaml --hw h20-8ssd",
        {"v.yaml": kvdrive("  gpu_time: measured\n")},
        "gpu_time: measured: NVIDIA H20 is not in aiconfigurator-core 0.12.0's systems",
    ),
    ("swarm-gpu-time", "sim --scenario v.yaml", {"v.yaml": swarm("  gpu_time: exact\n")}, "exact"),
    (
        "swarm-maintenance-rule",
        "sim --scenario v.yaml",
        {"v.yaml": swarm("  design_params: {maintenance_rule: min_size}\n")},
        "maintenance_rule must be one of",
    ),
    (
        "swarm-sweep-figure-unknown-key",
        "sweep --scenario v.yaml --factor ssds=1,2",
        {
            "v.yaml": swarm("  steps: 1\n")
            + "sweep_figures:\n  seed: s\n  figures:\n    - {name: n, section: s, metric: m, "
            "unit: x, seed: 1.0, at: {ssdz: 1}}\n"
        },
        "sweep_figures.figures[0].at.ssdz",
    ),
    (
        "serve-measured-tp-moe",
        "sim --scenario v.yaml --hw dgx-h100",
        {"v.yaml": serving("  gpu_time: measured\n  model: Qwen3-30B-A3B\n  tp: 2\n")},
        "gpu_time: measured: aiconfigurator-core 0.12.0 folds Qwen3-30B-A3B's MoE all-reduces",
    ),
    (
        "serve-steps",
        "sim --scenario v.yaml --steps 2",
        {"v.yaml": serving("  design: gpu-only\n")},
        "--steps",
    ),
    (
        "serve-elastic-layout",
        "sim --scenario v.yaml --hw h20-4gpu-nvlink",
        {
            "v.yaml": serving(
                "  instances:\n    - {name: w, gpu: gpu1, role: worker, lend_share: 0.5,"
                " elastic: {layout: diagonal}}\n"
            )
        },  # fmt: skip
        "elastic.layout",
    ),
    (
        "serve-elastic-n-i",
        "sim --scenario v.yaml --hw h20-4gpu-nvlink",
        {
            "v.yaml": serving(
                "  instances:\n    - {name: w, gpu: gpu1, role: worker, lend_share: 0.5,"
                " elastic: {n_i: all}}\n"
            )
        },  # fmt: skip
        "elastic.n_i",
    ),
    (
        "serve-stream-share",
        "sim --scenario v.yaml --hw h20-4gpu-nvlink",
        {
            "v.yaml": serving(
                "  instances:\n    - {name: w, gpu: gpu1, role: worker, lend_share: 0.6,"
                " stream_share: 0.4}\n"
            )
        },  # fmt: skip
        "stream_share",
    ),
    (
        "serve-lsc",
        "sim --scenario v.yaml --hw h20-4gpu-nvlink",
        {"v.yaml": serving("  instances:\n    - {name: m, gpu: gpu0, role: master, lsc: 2}\n")},
        "lsc",
    ),
    (
        "serve-cache-replies",
        "sim --scenario v.yaml --hw h20-4gpu-nvlink",
        {"v.yaml": serving("  instances:\n    - {name: m, gpu: gpu0, cache_replies: yes}\n")},
        "cache_replies",
    ),
    (
        "serve-router-unknown",
        "sim --scenario v.yaml --hw h20-4gpu-nvlink",
        {"v.yaml": serving("  router: fastest\n  replicas: 2\n")},
        "unknown router 'fastest'",
    ),
    (
        "serve-router-replicas",
        "sim --scenario v.yaml --hw h20-4gpu-nvlink",
        {"v.yaml": serving("  router: round_robin\n  replicas: 0\n")},
        "replicas: must be >= 1",
    ),
    (
        "serve-router-too-many-replicas",
        "sim --scenario v.yaml --hw h20-4gpu-nvlink",
        {"v.yaml": serving("  router: prefix\n  replicas: 5\n")},
        "fewer than 5 replicas",
    ),
    (
        "serve-router-no-such-instance",
        "sim --scenario v.yaml --hw h20-4gpu-nvlink",
        {
            "v.yaml": serving(
                "  router: least_queue\n  route_to: [a, c]\n"
                "  instances:\n    - {name: a, gpu: gpu0}\n    - {name: b, gpu: gpu1}\n"
            )
        },  # fmt: skip
        "no instance named 'c'",
    ),
    (
        "serve-router-param",
        "sim --scenario v.yaml --hw h20-4gpu-nvlink",
        {"v.yaml": serving("  router: prefix\n  replicas: 2\n  router_params: {weight: 1}\n")},
        "router_params.weight",
    ),
    (
        "serve-disagg-too-many",
        "sim --scenario v.yaml --hw h20-4gpu-nvlink",
        {"v.yaml": serving("  router: prefix\n  disaggregation: {prefill: 3, decode: 2}\n")},
        "fewer than 5 instances",
    ),
    (
        "serve-disagg-key",
        "sim --scenario v.yaml --hw h20-4gpu-nvlink",
        {"v.yaml": serving("  router: prefix\n  disaggregation: {prefill: 1, decode: 1, p: 1}\n")},
        "disaggregation.p",
    ),
    (
        "serve-disagg-zero",
        "sim --scenario v.yaml --hw h20-4gpu-nvlink",
        {"v.yaml": serving("  router: prefix\n  disaggregation: {prefill: 0, decode: 1}\n")},
        "disaggregation.prefill",
    ),
    (
        "serve-disagg-no-router",
        "sim --scenario v.yaml --hw h20-4gpu-nvlink",
        {"v.yaml": serving("  disaggregation: {prefill: 1, decode: 1}\n")},
        "disaggregation: needs a router",
    ),
    (
        "serve-disagg-decode-router",
        "sim --scenario v.yaml --hw h20-4gpu-nvlink",
        {
            "v.yaml": serving(
                "  router: prefix\n  disaggregation: {prefill: 1, decode: 1, "
                "decode_router: fastest}\n"
            )
        },  # fmt: skip
        "unknown router 'fastest'",
    ),
    (
        "serve-disagg-tiers",
        "sim --scenario v.yaml --hw h20-4gpu-nvlink",
        {
            "v.yaml": serving(
                "  design: paged-cpu\n  router: prefix\n  tier_scope: node\n"
                "  disaggregation: {prefill: 1, decode: 1}\n"
            )
        },  # fmt: skip
        "tier_scope: node with disaggregation",
    ),
    (
        "fleet-zero-nodes",
        "profiles show f.yaml",
        {"f.yaml": FLEET.replace("nodes: 2", "nodes: 0")},
        "fleet.nodes",
    ),
    (
        "fleet-zero-nic",
        "profiles show f.yaml",
        {"f.yaml": FLEET.replace("gbps: 50.0", "gbps: 0")},
        "fleet.nic.gbps",
    ),
    (
        "fleet-unknown-node",
        "profiles show f.yaml",
        {"f.yaml": FLEET.replace("dgx-h100", "dgx-h1000")},
        "unknown hardware profile 'dgx-h1000'",
    ),
    (
        "fleet-sim-too-many-replicas",
        "sim --scenario v.yaml --hw f.yaml",
        {"f.yaml": FLEET, "v.yaml": serving("  router: prefix\n  replicas: 17\n")},
        "fewer than 17 replicas",
    ),
    (
        "serve-tier-scope-unknown",
        "sim --scenario v.yaml --hw f.yaml",
        {
            "f.yaml": FLEET,
            "v.yaml": serving(
                "  design: paged-cpu\n  router: prefix\n  replicas: 2\n  tier_scope: rack\n"
            ),
        },  # fmt: skip
        "tier_scope: unknown scope 'rack'",
    ),
    (
        "serve-tier-scope-no-router",
        "sim --scenario v.yaml",
        {"v.yaml": serving("  design: paged-cpu\n  tier_scope: node\n")},
        "tier_scope: shares tiers among routed instances",
    ),
    (
        "fleet-tier-pool-too-large",
        "sim --scenario v.yaml --hw f.yaml",
        {
            "f.yaml": FLEET,
            "v.yaml": serving(
                "  design: paged-cpu\n  design_params: {cpu_gib: 300.0}\n"
                "  router: prefix\n  replicas: 16\n  tier_scope: node\n"
            ),
        },  # fmt: skip
        "hold 2,400.0 GiB on n0.dram0, which has 2,048.0 GiB",
    ),
    (
        "fleet-storage-no-devices",
        "profiles show f.yaml",
        {"f.yaml": FLEET_STORAGE, "s.yaml": SERVER_EMPTY},
        "fleet.storage.node_profile: s.yaml:4: ssds: a storage server holds no DRAM module",
    ),
    (
        "fleet-storage-unknown-server",
        "profiles show f.yaml",
        {"f.yaml": FLEET_STORAGE.replace("s.yaml", "3fs-storag")},
        "fleet.storage.node_profile: unknown storage-server profile '3fs-storag'",
    ),
    (
        "fleet-storage-nic-unknown-switch",
        "profiles show f.yaml",
        {"f.yaml": FLEET_STORAGE, "s.yaml": SERVER.replace("nics: [rc0]", "nics: [rc1]")},
        "nics[0]: NIC 0 hangs off unknown switch 'rc1'",
    ),
    (
        "fleet-storage-zero-nodes",
        "profiles show f.yaml",
        {"f.yaml": FLEET_STORAGE.replace("    nodes: 2", "    nodes: 0"), "s.yaml": SERVER},
        "fleet.storage.nodes: must be >= 1",
    ),
    (
        "fleet-storage-pool-too-large",
        "sim --scenario v.yaml --hw f.yaml",
        {
            "f.yaml": FLEET_STORAGE,
            "s.yaml": SERVER,
            "v.yaml": serving(
                "  design: paged-cpu\n  design_params: {cpu_gib: 10.0}\n"
                "  router: prefix\n  replicas: 16\n  tier_scope: storage\n"
            ),
        },  # fmt: skip
        "tier_scope: storage: the offload tiers hold 80.0 GiB on s0.dram0, which has 64.0 GiB",
    ),
    (
        "fleet-storage-scope-without-storage",
        "sim --scenario v.yaml --hw f.yaml",
        {
            "f.yaml": FLEET,
            "v.yaml": serving(
                "  design: paged-cpu\n  router: prefix\n  replicas: 2\n  tier_scope: storage\n"
            ),
        },  # fmt: skip
        "tier_scope: storage: profile f has no storage nodes",
    ),
    (
        "serve-gpu-util",
        "sim --scenario v.yaml",
        {"v.yaml": serving("  gpu_memory_utilization: 0\n")},
        "gpu_memory_utilization",
    ),
    # --- host threads and rates (sim.scenarios.host_threads)
    (
        "swarm-select-threads-negative",
        "sim --scenario w.yaml",
        {"w.yaml": swarm("  select_threads: -1\n")},
        "w.yaml:6: workload.select_threads: must be >= 0",
    ),
    (
        "swarm-select-rate-negative",
        "sim --scenario w.yaml",
        {"w.yaml": swarm("  select_gbps_per_thread: -2.0\n")},
        "workload.select_gbps_per_thread: must be >= 0",
    ),
    (
        "kvd-lookup-threads-zero",
        "sim --scenario k.yaml",
        {"k.yaml": kvdrive("  lookup_threads: 0\n")},
        "workload.lookup_threads: must be >= 1",
    ),
    (
        "kvd-stage-gbps-zero",
        "sim --scenario k.yaml",
        {"k.yaml": kvdrive("  stage_gbps: 0\n")},
        "workload.stage_gbps: must be > 0",
    ),
    # --- kvdrive points (a list of workload-field points every variant runs at)
    (
        "kvd-points-dict",
        "sim --scenario k.yaml",
        {"k.yaml": kvdrive("  points: {batch: 2}\n")},
        "points: must be a list",
    ),
    (
        "kvd-points-empty",
        "sim --scenario k.yaml",
        {"k.yaml": kvdrive("  points: [{}]\n")},
        "points[0]: must be a non-empty mapping",
    ),
    (
        "kvd-points-scalar",
        "sim --scenario k.yaml",
        {"k.yaml": kvdrive("  points: [3]\n")},
        "points[0]: must be a mapping",
    ),
    (
        "kvd-points-key",
        "sim --scenario k.yaml",
        {"k.yaml": kvdrive("  points: [{bacth: 2}]\n")},
        "points[0].bacth: unknown workload key",
    ),
    (
        "kvd-points-type",
        "sim --scenario k.yaml",
        {"k.yaml": kvdrive("  points: [{context_tokens: 1.5}]\n")},
        "points[0].context_tokens",
    ),
    (
        "kvd-points-zero",
        "sim --scenario k.yaml",
        {"k.yaml": kvdrive("  points:\n    - {batch: 2}\n    - {batch: 0}\n")},
        "k.yaml:8: workload.points[1].batch: must be > 0",
    ),
    (
        "kvd-points-dup",
        "sim --scenario k.yaml",
        {"k.yaml": kvdrive("  points: [{batch: 2}, {batch: 2}]\n")},
        "points[1]: duplicate point",
    ),
    (
        "kvd-points-nested",
        "sim --scenario k.yaml",
        {"k.yaml": kvdrive("  points: [{points: []}]\n")},
        "points[0].points",
    ),
    (
        "kvd-points-variant",
        "sim --scenario k.yaml",
        {"k.yaml": kvdrive("variants:\n  - {name: a, points: [{sparsity: 2}]}\n")},
        "variants[0].points[0].sparsity",
    ),
    (
        "kvd-points-too-big",
        "sim --scenario k.yaml --hw l20-server",
        {"k.yaml": kvdrive("  points: [{context_tokens: 1000000, batch: 1000}]\n")},
        "variant 'default | 1000000 | 1000': context_tokens",
    ),
    (
        "kvd-points-factor",
        "sweep --scenario kvdrive --hw l20-server --factor batch=1,2",
        {},
        "factor batch: the scenario's points set it",
    ),
    (
        "sweep-context-huge",
        "sweep --scenario s.yaml --hw h100-2dimm-2ssd --factor context_tokens=4096,1000000000000",
        {"s.yaml": sparse()},
        "context_tokens",
    ),
    # --- more layers than the model has; sizes that name their key, not memory or int32
    (
        "scen-layers-over-model",
        "sim --scenario s.yaml",
        {"s.yaml": sparse() + "  layers: 100\n"},
        "layers: 100 layers simulated, but Llama-3.1-8B has 32",
    ),
    (
        "swarm-layers-modeled-over",
        "sim --scenario w.yaml",
        {"w.yaml": swarm("  layers_modeled: 100\n")},
        "layers_modeled: 100",
    ),
    (
        "swarm-layers-modeled-over-layers",
        "sim --scenario w.yaml",
        {"w.yaml": swarm("  layers: 4\n  layers_modeled: 8\n")},
        "layers_modeled: 8",
    ),
    (
        "scen-steps-plan-huge",  # the KV (24 TiB) fits the 8 SSDs; 6.4e9 plan ops do not fit
        "sim --scenario s.yaml",
        {"s.yaml": sparse(steps="200000000")},
        "steps: 200,000,000 steps x 32 layers",
    ),
    (
        "scen-qd-int32",
        "sim --scenario s.yaml",
        {"s.yaml": sparse() + "  queue_depth: 10000000000\n"},
        "workload.queue_depth",
    ),
    (
        "serving-docs-huge",
        "sim --scenario v.yaml --hw h100-2dimm-2ssd",
        {"v.yaml": serving("  trace: long_doc\n  docs: 1000000000000\n")},
        "docs: 1,000,000,000,000 documents",
    ),
    # --- a price table: a non-finite price is refused, not printed as the cheapest
    ("price-usd-inf", f"{PLAN_CMD} --prices pr.yaml", {"pr.yaml": PRICE_INF}, "usd: must be"),
    # --- non-physical profile figures: above their unit's ceiling (hwprofiles.loader.CEILINGS)
    *[
        (f"prof-huge-{key}", "profiles show p.yaml", {"p.yaml": profile(old, new)}, needle)
        for key, old, new, needle in (
            ("gbps", "read_gbps: 14.7", "read_gbps: 1.0e+300", "p.yaml:79: ssds[0].read_gbps"),
            ("iops", "read_iops: 1850000", "read_iops: 1.0e+300", "ssds[0].read_iops: must be"),
            ("ssd-gib", "capacity_gib: 1862.6", "capacity_gib: 1.0e+300", "ssds[0].capacity_gib"),
            ("hbm", "hbm_gbps: 2000", "hbm_gbps: 1.0e+300", "gpu.hbm_gbps: must be at most"),
            ("cores", "cores: 16", "cores: 1000000", "cpu.cores: must be at most 4,096"),
            ("latency", "read_latency_us: ", "read_latency_us: 1.0e+300 #", "read_latency_us"),
        )
    ],
    (
        "prof-huge-link",
        "profiles show p.yaml",
        {
            "p.yaml": profile(
                "{name: dram0.bus, between: [mc0, dram0], gbps: *ddr4_channel",
                "{name: dram0.bus, between: [mc0, dram0], gbps: 1.0e+300",
            )
        },
        "topology.links[1].gbps: must be at most 100,000",
    ),
    # --- a swarm window or sink count beyond the context (32,768 tokens by default)
    (
        "swarm-window-huge",
        "sim --scenario w.yaml",
        {"w.yaml": swarm("  local_window: 1000000000000\n")},
        "workload.local_window: sink_tokens 4 + local_window 1,000,000,000,000 exceed",
    ),
    (
        "swarm-sinks-huge",
        "sim --scenario w.yaml",
        {"w.yaml": swarm("  sink_tokens: 1000000000000\n")},
        "workload.sink_tokens",
    ),
    (
        "swarm-window-over-context",
        "sim --scenario w.yaml",
        {"w.yaml": swarm("  context_tokens: 1024\n  local_window: 1021\n")},
        "sink_tokens 4 + local_window 1,021 exceed context_tokens 1,024",
    ),
    # --- a request-trace file found neither where kvtier runs nor beside the scenario
    (
        "serving-trace-missing",
        "sim --scenario sub/v.yaml",
        {"sub/v.yaml": serving("  trace: azure.parquet\n")},
        "sub/v.yaml:6: workload.trace: 'azure.parquet' is neither a built-in trace "
        "(conversation, long_doc, sharegpt_long, leval_long, mooncake_conversation, "
        "mooncake_synthetic, mooncake_tool_agent) nor a trace file (no file at "
        "'azure.parquet' or 'sub/azure.parquet')",
    ),
    (
        "serving-trace-missing-variant",
        "sim --scenario sub/v.yaml",
        {"sub/v.yaml": serving("variants:\n  - {name: a, trace: b.parquet}\n")},
        "variants[0].trace: 'b.parquet'",
    ),
    # --- a trace file with a request no instance can hold: refused before simulating
    (
        "serving-trace-request-unfit",
        "sim --scenario v.yaml",
        {
            "v.yaml": serving("  trace: t.csv\n"),
            "t.csv": "TIMESTAMP,ContextTokens,GeneratedTokens\n"
            "2023-11-16 18:15:46.6805900,374,44\n"
            "2023-11-16 18:15:50.9951690,900000,10\n",
        },
        "variant 'default': trace: request 1 holds 900,010 tokens of KV (prompt + output), "
        "over the GPU KV cache of 585,248 tokens (Llama-3.1-8B on h20-8ssd)",
    ),
    (
        "serving-trace-request-unfit-routed",
        "sim --scenario v.yaml",
        {
            "v.yaml": serving("  trace: t.csv\n  replicas: 2\n  router: round_robin\n"),
            "t.csv": "TIMESTAMP,ContextTokens,GeneratedTokens\n"
            "2023-11-16 18:15:46.6805900,900000,44\n",
        },
        "trace: request 0 holds 900,044 tokens of KV",
    ),
]
