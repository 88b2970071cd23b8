"""What the serving engine decides, as plain data (no clock, no simpy, no executor).

* :mod:`.seq` -- one request's serving state; :mod:`.gpucache` -- the GPU
  block pool and prefix cache (vLLM's block pool); :mod:`.prefix` -- lookups
  over the GPU and the offload tiers;
* :mod:`.manager` -- the block manager: loads, stores (vLLM's step-synchronous
  ``prepare_store`` or eager placement), write-through (:mod:`.writethrough`),
  a store's demotion job (:mod:`.demotions`), what a store offloads
  (:mod:`.storegroups`);
* :mod:`.jobs`, :mod:`.piece`, :mod:`.onepiece` -- transfers as data: what
  moves where and the byte ranges it touches;
* :mod:`.asyncload` -- AsyncKV's two legs (LMCache);
* :mod:`.costs`, :mod:`.objcost` -- an iteration's FLOPs and HBM bytes, and
  LMCache's CPU work per retrieved object.
"""
