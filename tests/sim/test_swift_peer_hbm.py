"""NVLink copies charge both endpoint GPUs' HBM (sim/serving/execute/multi.py PeerHbm),
and with ``copy_sm_share`` the SMs their NCCL kernels hold: a lending worker's kernel
slows by the copy's HBM time and the SM time it holds, worked out by hand."""

from __future__ import annotations

import pytest

from hwprofiles import load_profile
from sim.hw.machine import Machine
from sim.models import get_model
from sim.serving.designs import get_design
from sim.serving.execute.engine import EngineConfig
from sim.serving.execute.multi import Instance, PeerHbm, run_instances
from sim.serving.execute.online import OnlineOps
from sim.serving.requests import KeySpace, load_requests, request_table

PROFILE = load_profile("h20-4gpu-nvlink")
HBM = 4.0e12 * 0.90  # H20: 4.0 TB/s x the profile's HBM efficiency
CARD = get_model("Qwen3-8B")
PER_TOKEN = 36 * 8 * 128 * 2 * 2  # Qwen3-8B: 147,456 B of KV per token


def test_a_copy_slows_the_workers_kernel_by_its_hbm_time():
    # worker kernel: 36 GB of HBM traffic alone = 10 ms.  A 7.2 GB copy gpu1 -> gpu0 at
    # t = 0 charges 7.2 GB to each GPU (2 ms alone).  On gpu1 the two share the GPU
    # equally: the charge ends at 4 ms (2 ms of work at half rate), the kernel has done
    # 2 ms of its 10 then and ends at 4 + 8 = 12 ms = 10 + 2.  gpu0 has only the charge.
    m = Machine(PROFILE)
    assert m.hbm_bps == pytest.approx(HBM)
    worker = OnlineOps(m)
    _, kernel = worker.submit("compute", "", "gpu1", hbm_bytes=36e9)
    charge = PeerHbm(m)
    charge("gpu1", "gpu0", int(7.2e9))
    charge("dram0", "gpu0", int(7.2e9))  # a host copy is not a peer copy: nothing charged
    m.env.run()
    assert worker.end_s[0] == pytest.approx(36e9 / HBM + 7.2e9 / HBM, rel=1e-9)  # 12 ms
    assert list(charge.ops.end_s) == pytest.approx([7.2e9 / HBM * 2, 7.2e9 / HBM])
    assert charge.bytes == {"gpu1": 7.2e9, "gpu0": 7.2e9}


def test_every_peer_copy_is_charged_on_both_sides():
    # the master's 255-block prefix sits on gpu1 and reloads over NVLink: the charges
    # equal the bytes of the copies the master's plan holds, read on gpu1, written on gpu0
    design = get_design("gpu-only")
    rows = [{"request_id": 0, "arrival_s": 0.0, "session_id": 0, "turn": 1,
             "input_tokens": 4096, "output_tokens": 1}]  # fmt: skip
    warm = [dict(rows[0], request_id=1, turn=0)]
    space = KeySpace()  # one run: the query and its history in one key space
    reqs = load_requests(request_table(rows, 16), 16, space=space)
    pre = load_requests(request_table(warm, 16), 16, space=space)
    lend = 2 * 255 * 16 * PER_TOKEN
    insts = [
        Instance("m", CARD, design, EngineConfig(gpu_blocks=300, gpu="gpu0"), reqs, pre,
                 role="master"),
        Instance("w", CARD, design, EngineConfig(gpu_blocks=8, gpu="gpu1"), [], [],
                 role="worker", lend_bytes=lend),
    ]  # fmt: skip
    stats: dict = {}
    rec = run_instances(PROFILE, insts, stats)["m"]
    ops = rec.ops.to_pandas()
    copied = ops.loc[ops["kind"] == "copy", "bytes"].sum()
    assert copied == 255 * 16 * PER_TOKEN
    assert stats["peer_hbm_gb"] == pytest.approx({"gpu0": copied / 1e9, "gpu1": copied / 1e9})


NVL = 200e9 * 0.85  # the profile's NVLink, 200 GB/s a direction x its efficiency


def test_a_copy_holding_a_quarter_of_the_sms_slows_the_kernel_beside_it_by_hand():
    # worker kernel: 72 GB of HBM traffic alone = 20 ms.  A 1.7 GB copy gpu0 -> gpu1 takes
    # 1.7e9 / 170e9 = 10 ms alone on NVLink; its kernels hold 25% of each GPU for it
    # (a flow capped at 0.25 of 2.5 ms of GPU time) and charge 1.7 GB of HBM, H = 0.472 ms.
    # On gpu1, 0 .. t1: the SM hold runs at its cap 0.25 (under the fair third), the
    # kernel and the HBM charge split 0.75, 0.375 each, so the charge ends at t1 = H / 0.375
    # with H of the kernel done; t1 .. 10 ms: the kernel at 0.75; after 10 ms alone.  Left
    # at 10 ms: 20 - H - 0.75 (10 - H / 0.375) = 12.5 + H, so the kernel ends at
    # 22.5 ms + H = 20 + 0.25 x 10 + H: all the GPU's work, as the resource is never idle.
    # gpu0 has no kernel: its hold ends at 10 ms, the copy's time.
    m = Machine(PROFILE)
    worker = OnlineOps(m)
    worker.submit("compute", "", "gpu1", hbm_bytes=72e9)
    charge = PeerHbm(m, sm_share=0.25)
    charge("gpu0", "gpu1", int(1.7e9))
    m.env.run()
    h = 1.7e9 / HBM
    assert worker.end_s[0] == pytest.approx(0.020 + 0.25 * 0.010 + h, rel=1e-9)
    assert charge.sm_s == pytest.approx({"gpu0": 0.25 * 1.7e9 / NVL, "gpu1": 0.0025})
    g0 = m.gpu_res["gpu0"]  # busy for the copy's 10 ms, with its hold and its HBM charge
    assert m.gpu_net.busy_s[g0] == pytest.approx(0.010, rel=1e-9)
    assert m.gpu_net.work[g0] == pytest.approx(0.0025 + h, rel=1e-9)


def test_no_sm_share_leaves_the_hbm_charge_alone():
    # copy_sm_share 0 (a copy-engine transfer): the kernel ends at 20 ms + H, as before
    m = Machine(PROFILE)
    worker = OnlineOps(m)
    worker.submit("compute", "", "gpu1", hbm_bytes=72e9)
    charge = PeerHbm(m)
    charge("gpu0", "gpu1", int(1.7e9))
    m.env.run()
    assert worker.end_s[0] == pytest.approx(0.020 + 1.7e9 / HBM, rel=1e-9)
    assert charge.sm_s == {}
    with pytest.raises(ValueError, match="copy_sm_share"):
        PeerHbm(m, sm_share=1.0)
