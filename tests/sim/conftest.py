"""Shared fixtures: a tiny hand-checkable machine.

Test modules take these as fixtures (never ``from conftest import``: which
``conftest`` module that names depends on how pytest was invoked)."""

from collections.abc import Callable

import pytest

from hwprofiles import (
    CpuSpec,
    DramModule,
    EfficiencySpec,
    GpuSpec,
    HardwareProfile,
    LinkSpec,
    SoftwareSpec,
    SsdGroup,
    Topology,
)

# Samsung PM9A3 data-sheet figures (seed 000 §6.1: 6.9 GB/s, 1.1M IOPS);
# latency 80 us as in hwprofiles/h20-8ssd.yaml
PM9A3 = SsdGroup(
    model="PM9A3",
    count=2,
    capacity_gib=3576,
    read_gbps=6.9,
    write_gbps=4.1,
    read_iops=1_100_000,
    write_iops=200_000,
    read_latency_us=80.0,
    write_latency_us=20.0,
    max_queue_depth=128,
    max_io_kib=1280,
)


# datasheet = achievable: the hand arithmetic of the tests on the tiny machine uses
# the raw figures; tests/sim/test_efficiency.py checks the factors themselves
IDEAL = EfficiencySpec(
    pcie=1.0, nvlink=1.0, nvlink_c2c=1.0, membus=1.0, hbm=1.0, tensor=1.0, ssd=1.0
)


def tiny_profile(
    ssd: SsdGroup = PM9A3,
    ssd_link_gbps: float = 7.88,
    uplink_gbps: float = 100.0,
    cores: int = 4,
    gpudirect: bool = True,
    core_gflops: float = 100.0,
    core_mem_gbps: float = 10.0,
    efficiency: EfficiencySpec = IDEAL,
) -> HardwareProfile:
    """2 SSDs -> switch sw0 --uplink--> rc0 -> dram0; gpu0, gpu1 on rc0; NVLink between GPUs."""
    links = (
        LinkSpec("ssd0.pcie", ("ssd0", "sw0"), ssd_link_gbps, "pcie"),
        LinkSpec("ssd1.pcie", ("ssd1", "sw0"), ssd_link_gbps, "pcie"),
        LinkSpec("sw0.up", ("sw0", "rc0"), uplink_gbps, "pcie"),
        LinkSpec("dram0.bus", ("rc0", "dram0"), 50.0, "membus", "half"),
        LinkSpec("gpu0.pcie", ("gpu0", "rc0"), 25.0, "pcie"),
        LinkSpec("gpu1.pcie", ("gpu1", "rc0"), 25.0, "pcie"),
        LinkSpec("gpu0.nvlink", ("gpu0", "nvsw"), 200.0, "nvlink"),
        LinkSpec("gpu1.nvlink", ("gpu1", "nvsw"), 200.0, "nvlink"),
    )
    return HardwareProfile(
        name="tiny",
        description="hand-checkable test machine",
        gpu=GpuSpec("G", 2, 80.0, 2000.0, 100.0),
        cpu=CpuSpec("C", cores, core_gflops, core_mem_gbps),
        dram=(DramModule("dram0", 64.0, 50.0),),
        ssds=(ssd,),
        software=SoftwareSpec(
            kernel_fs_per_io_us=5.0,
            io_uring_per_io_us=1.0,
            passthrough_per_io_us=0.25,
            syscall_us=2.0,
            gds_per_io_us=3.0,
            gpudirect=gpudirect,
        ),
        topology=Topology(("sw0", "rc0", "nvsw"), links),
        efficiency=efficiency,
    )


@pytest.fixture(scope="session")
def pm9a3() -> SsdGroup:
    """The PM9A3 SSD group (2 drives) of the tiny machine."""
    return PM9A3


@pytest.fixture(scope="session")
def make_profile() -> Callable[..., HardwareProfile]:
    """:func:`tiny_profile`, to build variants of the tiny machine (session-scoped,
    so hypothesis tests may use it)."""
    return tiny_profile


@pytest.fixture
def tiny() -> HardwareProfile:
    return tiny_profile()


@pytest.fixture
def sparse_toy(tmp_path) -> Callable[..., object]:
    """A factory of toy ``sparse_decode`` scenarios for the sensitivity tests: a
    Llama-3.1-8B batch of 1 at 32K tokens, sparsity 0.1, 2 steps of 2 layers
    (``workload`` adds keys or overrides these), ``variants`` as given; written as
    YAML and loaded as a user's file would be."""
    import yaml

    from sim.config import load_scenario

    def make(name: str, description: str, variants: list[dict], **workload: object) -> object:
        doc = {
            "name": name,
            "description": description,
            "seed": 0,
            "workload": {"kind": "sparse_decode", "model": "Llama-3.1-8B",
                         "context_tokens": 32768, "batch": 1, "sparsity": 0.1, "steps": 2,
                         "layers": 2, **workload},
            "variants": variants,
        }  # fmt: skip
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return load_scenario(path)

    return make
