"""Routes, software-path CPU costs and the GPU roofline on the tiny machine."""

import pytest

from sim.hw.machine import Machine, RouteError


def test_routes_follow_the_topology(tiny):
    m = Machine(tiny)
    assert m.route_names("ssd0", "dram0") == ["ssd0.pcie>", "sw0.up>", "dram0.bus"]
    assert m.route_names("dram0", "ssd1") == ["dram0.bus", "sw0.up<", "ssd1.pcie<"]
    # GPUDirect: SSD -> GPU without touching host memory
    assert m.route_names("ssd0", "gpu1") == ["ssd0.pcie>", "sw0.up>", "gpu1.pcie<"]
    # peers talk over NVLink, not PCIe (equal hop count, wider links)
    assert m.route_names("gpu0", "gpu1") == ["gpu0.nvlink>", "gpu1.nvlink<"]


def test_half_duplex_bus_is_one_resource_full_duplex_two(tiny):
    m = Machine(tiny)
    names = m.net.names
    assert names.count("dram0.bus") == 1
    assert "sw0.up>" in names and "sw0.up<" in names


def test_route_errors(tiny):
    m = Machine(tiny)
    with pytest.raises(RouteError, match="unknown node 'ssd9'"):
        m.route("ssd9", "dram0")
    with pytest.raises(RouteError, match="itself"):
        m.route("gpu0", "gpu0")


def test_endpoints_do_not_forward(make_profile):
    # with gpu0's PCIe link removed, gpu0 is reachable only over NVLink; a
    # route from ssd0 must not hop through gpu1 and its NVLink to get there
    p = make_profile()
    links = tuple(lk for lk in p.topology.links if lk.name != "gpu0.pcie")
    import dataclasses

    p = dataclasses.replace(p, topology=dataclasses.replace(p.topology, links=links))
    with pytest.raises(RouteError, match="no path"):
        Machine(p).route("ssd0", "gpu0")


def test_cpu_seconds_by_software_path(tiny):
    m = Machine(tiny)
    # kernel fs: (5 us fs + 2 us syscall) per I/O
    assert m.cpu_seconds("kernel_fs", 1000, 32) == pytest.approx(1000 * 7e-6)
    # io_uring: 1 us per I/O + one 2 us io_uring_enter per 32 I/Os (32 batches)
    assert m.cpu_seconds("io_uring", 1024, 32) == pytest.approx(1024e-6 + 32 * 2e-6)
    # passthrough: 0.25 us per I/O, no syscalls
    assert m.cpu_seconds("passthrough", 1000, 32) == pytest.approx(250e-6)
    # gds: kernel path plus 3 us cuFile per I/O
    assert m.cpu_seconds("gds", 10, 32) == pytest.approx(10 * 10e-6)
    assert m.cpu_seconds("none", 10, 32) == 0.0
    with pytest.raises(ValueError):
        m.cpu_seconds("spdk2", 1, 1)


def test_gpu_roofline(tiny):
    m = Machine(tiny)
    # 100 TFLOP/s, 2000 GB/s: 1e12 FLOPs = 10 ms compute; 1e9 B = 0.5 ms memory
    assert m.gpu_seconds("gpu0", 1e12, 1e9) == pytest.approx(0.01)
    assert m.gpu_seconds("gpu0", 1e9, 1e10) == pytest.approx(0.005)
    with pytest.raises(RouteError):
        m.gpu_seconds("gpu7", 1.0, 1.0)
