"""Plan execution: dependencies, sharing, software costs, records."""

import math

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtier.contracts.plan import PlanBuilder, PlanError
from sim.executor import simulate

MIB = 1 << 20


def ops_of(rec):
    return rec.ops.to_pandas().set_index("op_id")


def test_chain_of_read_copy_compute(tiny):
    b = PlanBuilder()
    r = b.read("ssd0", "dram0", 69 * MIB, 69, queue_depth=32, io_path="passthrough")
    c = b.copy("dram0", "gpu0", 25 * MIB, depends_on=[r])
    k = b.compute("gpu0", 1e12, 0.0, depends_on=[c])
    ops = ops_of(simulate(b.table(), tiny))
    t_read = 80e-6 + 69 * MIB / 6.9e9  # PM9A3, bandwidth-bound
    t_copy = 25 * MIB / 25e9  # gpu0.pcie is 25 GB/s, the narrowest hop
    assert ops.loc[r, "end_s"] == pytest.approx(t_read)
    assert ops.loc[c, "start_s"] == ops.loc[r, "end_s"]
    assert ops.loc[c, "end_s"] == pytest.approx(t_read + t_copy)
    assert ops.loc[k, "end_s"] == pytest.approx(t_read + t_copy + 0.01)


def test_two_ssds_share_the_uplink(make_profile):
    # uplink 10 GB/s < 2 x 6.9: both reads get 5 GB/s each
    p = make_profile(uplink_gbps=10.0)
    b = PlanBuilder()
    for ssd in ("ssd0", "ssd1"):
        b.read(ssd, "dram0", 100 * MIB, 100, queue_depth=32, io_path="passthrough")
    rec = simulate(b.table(), p)
    ops = ops_of(rec)
    assert ops["end_s"].tolist() == pytest.approx([80e-6 + 100 * MIB / 5e9] * 2)
    dev = rec.devices.to_pandas().set_index("device")
    assert rec.stats["capacity_peak"]["sw0.up>"] == pytest.approx(1.0)
    assert dev.loc["sw0.up>", "bytes_read"] == 200 * MIB


def test_cpu_bound_software_path_stretches_the_op(tiny):
    # 100k 4 KiB reads via kernel fs: 7 us CPU each = 0.7 s on one core,
    # while the SSD would need 100k / 1.1M IOPS = 0.09 s
    b = PlanBuilder()
    b.read("ssd0", "dram0", 100_000 * 4096, 100_000, queue_depth=128, io_path="kernel_fs")
    ops = ops_of(simulate(b.table(), tiny))
    assert ops.loc[0, "end_s"] == pytest.approx(0.7)
    assert ops.loc[0, "cpu_s"] == pytest.approx(0.7)


def test_cpu_cores_are_finite(make_profile):
    # 1 core, two CPU-bound ops: they share the core, each takes twice as long
    p = make_profile(cores=1)
    b = PlanBuilder()
    for ssd in ("ssd0", "ssd1"):
        b.read(ssd, "dram0", 10_000 * 4096, 10_000, queue_depth=128, io_path="kernel_fs")
    ops = ops_of(simulate(b.table(), p))
    assert ops["end_s"].tolist() == pytest.approx([2 * 0.07] * 2)


def test_release_time_and_fanin(tiny):
    b = PlanBuilder()
    a = b.compute("gpu0", 1e11, 0.0)  # 1 ms
    c = b.compute("gpu1", 3e11, 0.0)  # 3 ms, other GPU: runs in parallel
    d = b.compute("gpu0", 1e11, 0.0, depends_on=[a, c], release_s=0.005)
    ops = ops_of(simulate(b.table(), tiny))
    assert ops.loc[d, "ready_s"] == pytest.approx(0.003)
    assert ops.loc[d, "start_s"] == pytest.approx(0.005)
    assert ops.loc[d, "end_s"] == pytest.approx(0.006)


def test_concurrent_kernels_share_a_gpu(tiny):
    b = PlanBuilder()
    b.compute("gpu0", 1e11, 0.0)
    b.compute("gpu0", 1e11, 0.0)
    ops = ops_of(simulate(b.table(), tiny))
    assert ops["end_s"].tolist() == pytest.approx([0.002, 0.002])


def test_gpudirect_read_skips_dram(tiny):
    b = PlanBuilder()
    b.read("ssd0", "gpu0", 64 * MIB, 64, queue_depth=32, io_path="gds")
    rec = simulate(b.table(), tiny)
    dev = rec.devices.to_pandas().set_index("device")
    assert dev.loc["dram0.bus", "bytes_read"] == 0
    assert dev.loc["gpu0.pcie<", "bytes_read"] == 64 * MIB


op_spec = st.tuples(
    st.sampled_from(["read", "write", "copy", "compute"]),
    st.integers(0, 1),  # which SSD / GPU
    st.integers(1, 64),  # MiB or GFLOP x 10
    st.integers(1, 64),  # n_ios
    st.sampled_from([1, 8, 32, 0]),
    st.sampled_from(["io_uring", "kernel_fs", "passthrough"]),
    st.lists(st.integers(0, 30), max_size=3),
)


def build(spec):
    b = PlanBuilder()
    for i, (kind, dev, size, n_ios, qd, path, deps) in enumerate(spec):
        deps = sorted({d for d in deps if d < i})
        kw = {"depends_on": deps, "queue_depth": qd}
        if kind == "read":
            b.read(f"ssd{dev}", "dram0", size * MIB, n_ios, io_path=path, **kw)
        elif kind == "write":
            b.write("dram0", f"ssd{dev}", size * MIB, n_ios, io_path=path, **kw)
        elif kind == "copy":
            b.copy("dram0", f"gpu{dev}", size * MIB, depends_on=deps)
        else:
            b.compute(f"gpu{dev}", size * 1e10, size * 1e6, depends_on=deps)
    return b.table()


@settings(max_examples=60, deadline=None)
@given(st.lists(op_spec, min_size=1, max_size=25))
def test_execution_invariants(make_profile, spec):
    profile = make_profile(uplink_gbps=9.0)
    plan = build(spec)
    rec = simulate(plan, profile)
    ops = ops_of(rec)
    deps = plan.column("depends_on").to_pylist()
    for i, d in enumerate(deps):
        assert ops.loc[i, "start_s"] >= ops.loc[i, "ready_s"]
        assert ops.loc[i, "end_s"] > ops.loc[i, "start_s"]
        for j in d:  # an op never starts before what it depends on has ended
            assert ops.loc[i, "ready_s"] >= ops.loc[j, "end_s"]
    dev = rec.devices.to_pandas().set_index("device")
    # bytes conserved: what the plan says each SSD moves is what it moved
    pl = plan.to_pandas()
    for ssd in ("ssd0", "ssd1"):
        reads = pl[(pl.kind == "read") & (pl.src == ssd)]["bytes"].sum()
        writes = pl[(pl.kind == "write") & (pl.dst == ssd)]["bytes"].sum()
        assert dev.loc[ssd, "bytes_read"] == reads
        assert dev.loc[ssd, "bytes_written"] == writes
        assert dev.loc[f"{ssd}.pcie>", "bytes_read"] == pytest.approx(reads, abs=2)
        assert dev.loc[f"{ssd}.pcie<", "bytes_read"] == pytest.approx(writes, abs=2)
    # the shared bus carries every SSD and copy byte exactly once
    io = pl[pl.kind.isin(["read", "write", "copy"])]["bytes"].sum()
    assert dev.loc["dram0.bus", "bytes_read"] == pytest.approx(io, abs=4)
    # nothing ever above capacity
    assert max(rec.stats["capacity_peak"].values()) <= 1 + 1e-9
    assert not math.isnan(rec.makespan_s)
    # same plan, same records
    again = simulate(plan, profile)
    assert again.ops.equals(rec.ops)
    assert again.devices.equals(rec.devices)


def test_ops_of_one_shape_share_physics_and_a_nan_is_refused(tiny):
    # six reads of two shapes (69 and 23 MiB), each alone on the machine in turn
    # (chained), so op k ends exactly one read time after op k-1; a NaN in the
    # read's unused flops column never reaches the executor's shape grouping
    b = PlanBuilder()
    prev = []
    sizes = [69, 23, 69, 23, 69, 23]
    for mib in sizes:
        prev = [
            b.read(
                "ssd0",
                "dram0",
                mib * MIB,
                mib,
                queue_depth=32,
                io_path="passthrough",
                depends_on=prev,
            )
        ]
    plan = b.table()
    ops = ops_of(simulate(plan, tiny))
    took = (ops["end_s"] - ops["start_s"]).tolist()
    assert took == pytest.approx([80e-6 + mib * MIB / 6.9e9 for mib in sizes])
    flops = plan.column("flops").to_numpy().copy()
    flops[1] = math.nan
    i = plan.schema.get_field_index("flops")
    plan = plan.set_column(i, plan.schema.field("flops"), pa.array(flops))
    with pytest.raises(PlanError, match="op 1: flops must be a finite number"):
        simulate(plan, tiny)
