"""Routers over identical serving instances (sim/fleet/router/, sim/fleet/routed.py):
each policy's pick worked by hand, Dynamo's logits with their numbers, and engine runs
on four GPUs where the prefix-aware router keeps a session on the instance holding
its prefix."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hwprofiles import load_profile
from sim.config import ServingParams
from sim.fleet.routed import fleet_records, run_routed
from sim.fleet.router import InstanceState, KeySet, make_router
from sim.fleet.router.prefix_aware import pieces, prompt_blocks
from sim.models import get_model
from sim.registry import ROUTERS, RegistryError
from sim.scenarios.serving import conversation_table
from sim.scenarios.serving_routed import turn_affinity
from sim.serving.designs import get_design
from sim.serving.execute.engine import EngineConfig
from sim.serving.execute.multi import Instance
from sim.serving.metrics import serving_summary
from sim.serving.requests import Request, load_requests
from sim.serving.tiers.gpucache import GpuCache

B = 16


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _req(rid: int, tokens: int, hashes=()) -> Request:
    return Request(rid, 0.0, -1, 0, tokens, 8, tuple(hashes))


def _state(queued=0, running=0, kv_used=0, kv_blocks=100, cached=()) -> InstanceState:
    return InstanceState(queued, running, kv_used, kv_blocks, KeySet(cached))


def test_the_registry_holds_the_four_policies() -> None:
    assert ROUTERS.names() == ["least_kv", "least_queue", "prefix", "round_robin"]
    with pytest.raises(RegistryError, match="unknown router 'random'"):
        make_router("random", {}, 2, B, _rng())
    with pytest.raises(RegistryError, match="overlap_weight"):
        make_router("prefix", {"overlap_weight": -1.0}, 2, B, _rng())


def test_round_robin_cycles_whatever_the_load() -> None:
    rr = make_router("round_robin", {}, 3, B, _rng())
    busy = [_state(queued=9), _state(), _state()]  # instance 0 is loaded: ignored
    assert [rr.choose(_req(k, 64), busy) for k in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_least_queue_and_least_kv_pick_by_hand() -> None:
    states = [
        _state(queued=3, kv_used=20),
        _state(queued=1, kv_used=70),
        _state(queued=2, kv_used=40),
    ]
    assert make_router("least_queue", {}, 3, B, _rng()).choose(_req(0, 64), states) == 1
    assert make_router("least_kv", {}, 3, B, _rng()).choose(_req(0, 64), states) == 0
    # equal KV capacity fractions: 30/100 < 35/100 (instance 1 holds fewer of its blocks)
    states = [_state(kv_used=35), _state(kv_used=30), _state(kv_used=35)]
    assert make_router("least_kv", {}, 3, B, _rng()).choose(_req(0, 64), states) == 1


def test_ties_are_broken_at_random_among_the_least_loaded_only() -> None:
    states = [_state(queued=1), _state(queued=4), _state(queued=1)]
    lq = make_router("least_queue", {}, 3, B, _rng(7))
    picks = {lq.choose(_req(k, 64), states) for k in range(40)}
    assert picks == {0, 2}  # both tied instances, never the longer queue


def test_cached_prefix_stops_at_the_first_missing_block() -> None:
    assert KeySet({1, 2, 4}).prefix_blocks(np.array([1, 2, 3, 4])) == 2
    assert KeySet({2, 3}).prefix_blocks(np.array([1, 2, 3])) == 0
    assert KeySet({1, 2, 3}).prefix_blocks(np.array([1, 2, 3])) == 3
    assert KeySet().prefix_blocks(np.array([1])) == 0


def test_a_gpu_caches_prefix_is_the_same_match_read_off_its_slot_table() -> None:
    """The GPU cache a routed instance shows: keys 5-9 cached (a request's blocks,
    then released: still cached), 11 too; [5, 6, 7, 8, 9, 10, 11] matches 5 blocks,
    [6, 7] both, [4, 5] none, and a key past any page made (1 << 40) none."""
    gpu = GpuCache(64)
    blocks, _ = gpu.promote_all([5, 6, 7, 8, 9], ready=True)
    gpu.release(blocks, 0)
    gpu.promote_all([11], ready=False)
    for keys, want in (([5, 6, 7, 8, 9, 10, 11], 5), ([6, 7], 2), ([4, 5], 0), ([1 << 40], 0)):
        assert gpu.prefix_blocks(np.array(keys)) == want
        assert KeySet(gpu.cached_keys()).prefix_blocks(np.array(keys)) == want


def test_a_prompts_blocks_are_runs_of_consecutive_ids_within_a_page() -> None:
    """Pages of 4,096 ids: [3, 4, 5, 9, 4094, 4095, 4096, 4097, 2] is four runs, the
    one across the page boundary cut there: (0, 3, 6), (0, 9, 10), (0, 4094, 4096),
    (1, 0, 2), (0, 2, 3)."""
    keys = np.array([3, 4, 5, 9, 4094, 4095, 4096, 4097, 2])
    assert pieces(keys) == [(0, 3, 6), (0, 9, 10), (0, 4094, 4096), (1, 0, 2), (0, 2, 3)]
    assert pieces(np.array([], dtype=np.int64)) == []
    assert sum(hi - lo for _, lo, hi in pieces(keys)) == len(keys)


def test_prefix_router_weighs_the_cached_prefix_against_load_with_dynamos_numbers() -> None:
    """A 192-token prompt (12 blocks of 16) whose first 10 blocks instance 0 caches.
    logit = overlap_weight x prefill tokens / 16 + decode blocks:
    idle:    instance 0: (192 - 160) / 16 + 12 = 14;   instance 1: 192 / 16 + 12 = 24
    loaded (instance 0 runs an unrelated 128-token request, 8 blocks, still in prefill):
             instance 0: (32 + 128) / 16 + (12 + 8) = 30 -> instance 1 (24) wins
    that request prefilled: (32 + 0) / 16 + 20 = 22 -> instance 0 wins again."""
    seq = tuple(range(1, 13))
    req = _req(1, 192, seq)
    states = [_state(cached=range(1, 11)), _state()]
    r = make_router("prefix", {}, 2, B, _rng())
    assert r.logits(req, states) == [(14.0, 10), (24.0, 0)]
    r.workers[0].add(99, pieces(np.arange(201, 209)), 128)  # what choose() records for it
    assert r.logits(req, states) == [(30.0, 10), (24.0, 0)]
    assert r.choose(req, states) == 1
    assert r.workers[1].active_tokens == 192 and r.workers[1].blocks == 12  # recorded there
    r.finished(1, 1)
    r.prefilled(0, 99)
    assert r.logits(req, states) == [(22.0, 10), (24.0, 0)]
    assert r.choose(_req(2, 192, seq), states) == 0
    r.finished(0, 99)
    r.finished(0, 2)
    assert r.workers[0].active_tokens == 0 and r.workers[0].blocks == 0
    assert r.workers[0].pages == {} and r.owners == {}  # every page let go
    # weight 0: the cache no longer counts, only decode blocks (12 on each): a tie
    w0 = make_router("prefix", {"overlap_weight": 0.0}, 2, B, _rng())
    assert w0.logits(req, states) == [(12.0, 10), (12.0, 0)]


def test_prefix_router_counts_blocks_shared_with_active_requests_once() -> None:
    """Instance 0 runs a request on blocks 1-8; a new 12-block prompt extending it
    adds only 4 new decode blocks there: 8 + 4 = 12, plus its prefill 192 / 16."""
    r = make_router("prefix", {}, 2, B, _rng())
    r.workers[0].add(5, pieces(np.arange(1, 9)), 0)  # already prefilled
    req = _req(6, 192, tuple(range(1, 13)))
    assert r.logits(req, [_state(), _state()]) == [(12.0 + 12.0, 0), (12.0 + 12.0, 0)]
    r.workers[0].add(7, pieces(np.arange(101, 105)), 0)
    assert r.logits(req, [_state(), _state()]) == [(12.0 + 16.0, 0), (24.0, 0)]


def test_prefix_router_counts_each_workers_active_blocks_where_its_pages_are() -> None:
    """The blocks a worker already holds, counted on the workers that have the
    prompt's pages.  Worker 0 runs [1, 2, 3]; worker 1 runs [1, 2] and [2, 9]
    (block 2 held twice); worker 2 nothing.  For the prompt [1, 2, 3, 4]: held
    3, 2, 0, so new blocks 1, 2, 4 and decode blocks 1 + 3, 2 + 3, 4 + 0 = 4, 5, 4.
    Freeing worker 1's [1, 2] leaves its block 2 (still in [2, 9]): held 3, 1, 0."""
    r = make_router("prefix", {}, 3, B, _rng())
    r.workers[0].add(10, pieces(np.array([1, 2, 3])), 0)
    r.workers[1].add(11, pieces(np.array([1, 2])), 0)
    r.workers[1].add(12, pieces(np.array([2, 9])), 0)
    seq = pieces(np.array([1, 2, 3, 4]))
    assert r.held(seq) == [3, 2, 0]
    assert [w.blocks for w in r.workers] == [3, 3, 0] and r.owners == {0: {0, 1}}
    req = _req(13, 4 * B, (1, 2, 3, 4))  # overlap 0 everywhere: prefill 64 / 16 = 4 on each
    assert r.logits(req, [_state()] * 3) == [(4.0 + 4, 0), (4.0 + 5, 0), (4.0 + 4, 0)]
    r.finished(1, 11)
    assert r.held(seq) == [3, 1, 0]
    assert [r.workers[1].count(k) for k in (1, 2, 9)] == [0, 1, 1] and r.workers[1].blocks == 2
    for i, rid in ((0, 10), (1, 12)):
        r.finished(i, rid)
    assert r.owners == {} and r.held(seq) == [0, 0, 0]


def test_prefix_routers_paged_counts_match_a_count_per_block_through_random_requests() -> None:
    """Three workers take and free 400 random prompts (runs of ids across page
    boundaries, repeats within a prompt included); after each step every worker's
    count of every key, its active block count and the held counts of a probe
    prompt equal those of a plain dict of counts kept beside it, block by block."""
    rng = np.random.default_rng(11)
    r = make_router("prefix", {}, 3, B, _rng())
    model: list[dict[int, int]] = [{}, {}, {}]
    live: list[tuple[int, int, list[int]]] = []  # (worker, rid, keys)
    for rid in range(400):
        if live and rng.random() < 0.45:
            i, gone, keys = live.pop(int(rng.integers(len(live))))
            r.finished(i, gone)
            for k in keys:
                model[i][k] -= 1
                if not model[i][k]:
                    del model[i][k]
        else:
            parts = [np.arange(a, a + n) for a, n in rng.integers([0, 1], [9000, 300], (3, 2))]
            keys = np.concatenate(parts).tolist()
            i = int(rng.integers(3))
            r.workers[i].add(rid, pieces(np.array(keys)), 16)
            live.append((i, rid, keys))
            for k in keys:
                model[i][k] = model[i].get(k, 0) + 1
        probe = rng.integers(0, 9000, 50).tolist()
        assert r.held(pieces(np.array(probe))) == [sum(k in m for k in probe) for m in model]
        assert [w.blocks for w in r.workers] == [len(m) for m in model]
        for w, m in zip(r.workers, model, strict=True):
            assert all(w.count(k) == n for k, n in m.items())
            assert set(w.pages) == {k >> 12 for k in m}  # pages let go with their last block


def test_prefix_router_reads_a_prompts_full_blocks() -> None:
    """A request of 3 full blocks and a partial one (3 * 16 + 5 tokens) over an int64
    view of 5 keys: the router keeps its first 3; a tuple of keys gives the same."""
    view = np.array([7, 8, 9, 10, 11], dtype=np.int64)
    req = Request(0, 0.0, -1, 0, 3 * B + 5, 8, view)
    assert prompt_blocks(req, B).tolist() == [7, 8, 9]
    assert prompt_blocks(_req(1, 3 * B + 5, (7, 8, 9, 10, 11)), B).tolist() == [7, 8, 9]
    r = make_router("prefix", {}, 2, B, _rng())
    assert r.choose(req, [_state(), _state(cached={7})]) == 1  # the cached prefix's worker
    assert r.workers[1].blocks == 3 and [r.workers[1].count(k) for k in (7, 8, 9, 10)] == [
        1,
        1,
        1,
        0,
    ]


# ---- engine runs --------------------------------------------------------------------
PROFILE = load_profile("h20-4gpu-nvlink")  # four H20s
P = ServingParams(sessions=10, turns=4.0, session_rate=2.0, think_s=1.0, prompt_tokens=256,
                  reply_tokens=32, max_context=4096)  # fmt: skip


def _run(router: str):
    reqs = load_requests(conversation_table(P, seed=3), B)
    card, design = get_model("Llama-3.1-8B"), get_design("gpu-only", {})
    insts = [Instance(f"r{k}", card, design, EngineConfig(gpu_blocks=4000, gpu=f"gpu{k}"), [])
             for k in range(4)]  # fmt: skip
    records, where = run_routed(PROFILE, insts, reqs, make_router(router, {}, 4, B, _rng()))
    return reqs, records, where


@pytest.fixture(scope="module")
def runs():
    return {name: _run(name) for name in ("round_robin", "prefix")}


def test_every_request_is_served_once_on_the_instance_it_was_routed_to(runs) -> None:
    for reqs, records, where in runs.values():
        assert 24 <= len(reqs) <= 60 and sorted(where) == sorted(r.rid for r in reqs)
        for k in range(4):
            ids = records[f"r{k}"].requests.column("request_id").to_pylist()
            assert sorted(ids) == sorted(rid for rid, i in where.items() if i == k)
        fleet = fleet_records([records[f"r{k}"] for k in range(4)])
        got = fleet.requests.column("request_id").to_pylist()
        assert got == sorted(r.rid for r in reqs)
        assert not any(fleet.requests.column("rejected").to_pylist())


def test_fleet_records_sum_the_counts_and_keep_what_timed_the_compute(runs) -> None:
    """The joined records' counts are the instances' sums, and the run says what
    timed its GPU compute (the run's provenance reads it: without it a fleet on a
    GPU the measured tables cover was reported as the roofline)."""
    _, records, _ = runs["prefix"]
    parts = [records[f"r{k}"] for k in range(4)]
    fleet = fleet_records(parts)
    for key in ("iterations", "gpu_evictions"):
        assert fleet.stats[key] == sum(r.stats[key] for r in parts)
    assert fleet.stats["iterations"] > 0
    assert {r.stats["gpu_time"] for r in parts} == {fleet.stats["gpu_time"]}
    assert fleet.stats["gpu_time"].startswith("roofline")  # H20s: the tables have none


def test_prefix_router_keeps_sessions_where_their_prefix_is_and_hits_more(runs) -> None:
    """The mechanism: the prefix router sends a session's later turns to the
    instance that served its previous turn (its prefix is cached there) unless that
    instance's load outweighs the prefix (in this trace one turn of 19: 9 cached
    blocks, but 30 active blocks there, logit 67.06 against 46.06 on an idle one),
    round-robin mostly elsewhere; and a GPU hit happens only on an instance that
    served an earlier turn of the same session (sessions share no blocks)."""
    rates = {}
    for name, (reqs, records, where) in runs.items():
        fleet = fleet_records([records[f"r{k}"] for k in range(4)])
        rates[name] = serving_summary(fleet, B)["hit_rate_gpu"]
        cols = fleet.requests.select(["request_id", "hit_blocks_gpu"]).to_pydict()
        hits = dict(zip(cols["request_id"], cols["hit_blocks_gpu"], strict=True))
        served: dict[int, set[int]] = {}
        for r in sorted(reqs, key=lambda r: (r.session, r.turn)):
            if hits[r.rid]:
                assert where[r.rid] in served.get(r.session, set())
            served.setdefault(r.session, set()).add(where[r.rid])
    reqs, _, where = runs["prefix"]
    assert turn_affinity(where, reqs) >= 0.9
    assert turn_affinity(runs["round_robin"][2], runs["round_robin"][0]) < 0.5
    assert rates["prefix"] > rates["round_robin"] + 0.2


def test_the_fleet_plan_and_op_records_agree_op_for_op(runs) -> None:
    _, records, _ = runs["prefix"]
    fleet = fleet_records([records[f"r{k}"] for k in range(4)])
    plan = fleet.plan.to_pandas()
    ops = fleet.ops.to_pandas()
    assert list(plan["op_id"]) == list(range(len(ops))) == list(ops["op_id"])
    for col in ("kind", "src", "dst", "bytes", "step"):
        assert list(plan[col]) == list(ops[col])
    assert all(
        d < i for i, deps in zip(plan["op_id"], plan["depends_on"], strict=True) for d in deps
    )


def test_serving_params_check_the_router_fields() -> None:
    with pytest.raises(ValueError, match="needs a router"):
        ServingParams(replicas=2)
    with pytest.raises(ValueError, match="must be >= 1"):
        ServingParams(router="prefix")
    with pytest.raises(ValueError, match="only its name and gpu"):
        ServingParams(router="prefix", instances=({"name": "a", "gpu": "gpu0", "model": "x"},))
    ok = ServingParams(router="least_kv", replicas=3)
    assert dataclasses.replace(ok, router="round_robin").replicas == 3


def test_a_routed_variant_runs_through_the_scenario_driver() -> None:
    """router_params reach the policy (weight 0), the summary splits the requests by
    instance and they add up to the run's."""
    from sim.scenarios.serving import prepare

    p = dataclasses.replace(P, sessions=4, router="prefix", replicas=2,
                            router_params={"overlap_weight": 0.0})  # fmt: skip
    drive, summarize = prepare(p, PROFILE, 0, "prefix w0")
    row = summarize(drive())
    assert row["router"] == "prefix" and row["instances"] == 2
    assert row["r0_requests"] + row["r1_requests"] == row["requests"] > 0


def test_route_to_spreads_over_the_named_instances_beside_one_with_its_own_trace() -> None:
    from sim.scenarios.serving import prepare

    insts = ({"name": "a", "gpu": "gpu0"}, {"name": "b", "gpu": "gpu2"},
             {"name": "own", "gpu": "gpu1", "sessions": 2})  # fmt: skip
    p = dataclasses.replace(P, sessions=4, router="round_robin", instances=insts,
                            route_to=("a", "b"))  # fmt: skip
    drive, summarize = prepare(p, PROFILE, 0, "rr")
    row = summarize(drive())
    assert row["instances"] == 2 and row["a_requests"] + row["b_requests"] == row["requests"]
    assert abs(row["a_requests"] - row["b_requests"]) <= 1  # round-robin alternates
    assert row["own_ttft_mean_s"] > 0  # served its own trace beside them


def test_a_fleets_blocked_io_is_its_instances_summed() -> None:
    """LMCache loads a hit in the forward pass, before the computation: a load
    blocks its own GPU, whatever another computes.  The joined records' blocked
    I/O is the sum of each instance's own (their summaries, computed apart), and
    more than one union of both GPUs' computations leaves uncovered (which counts a
    load on one GPU as covered by the other's computation)."""
    q = dataclasses.replace(P, sessions=24, turns=5.0, session_rate=4.0, prompt_tokens=512)
    reqs = load_requests(conversation_table(q, seed=3), B)
    card = get_model("Llama-3.1-8B")
    design = get_design("lmcache", {"cpu_gib": 8.0, "chunk_tokens": B})  # a chunk a block
    insts = [Instance(f"r{k}", card, design, EngineConfig(gpu_blocks=120, gpu=f"gpu{k}"), [])
             for k in range(2)]  # fmt: skip
    records, _ = run_routed(PROFILE, insts, reqs, make_router("round_robin", {}, 2, B, _rng()))
    parts = [records[f"r{k}"] for k in range(2)]
    fleet = fleet_records(parts)
    assert fleet.parts == tuple(len(r.ops) for r in parts)
    own = [serving_summary(r, B)["blocked_io_s"] for r in parts]
    assert min(own) > 0.0
    got = serving_summary(fleet, B)["blocked_io_s"]
    assert got == pytest.approx(sum(own), rel=1e-12)
    merged = serving_summary(dataclasses.replace(fleet, parts=()), B)["blocked_io_s"]
    assert merged < 0.9 * got


def test_the_fleets_timeline_sums_its_instances(runs) -> None:
    """The joined records carry a timeline: once every instance has stopped
    changing, the fleet's last row is their last rows summed, and it never holds
    fewer requests waiting at once than any one instance did."""
    _, records, _ = runs["prefix"]
    parts = [records[f"r{k}"].timeline.to_pandas() for k in range(4)]
    fleet = fleet_records([records[f"r{k}"] for k in range(4)]).timeline.to_pandas()
    cols = ["waiting", "loading", "running", "gpu_blocks_used"]
    assert fleet[cols].iloc[-1].tolist() == sum(p[cols].iloc[-1] for p in parts).tolist()
    assert fleet["t_s"].iloc[-1] == max(p["t_s"].iloc[-1] for p in parts)
    assert fleet["waiting"].max() >= max(p["waiting"].max() for p in parts)
    assert fleet["t_s"].is_monotonic_increasing and fleet["t_s"].is_unique
