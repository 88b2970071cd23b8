"""The Swarm paper's baselines (seed 000 §8.1) as :class:`KVDesign` s.

* ``nocluster`` — sequential chunks over the SSDs, no index; oracle top-k
  over every visible key (the whole KV is loaded to score it);
* ``infllm`` — fixed blocks of consecutive tokens, representative keys as the
  index, one contiguous read per block;
* ``pqcache`` — k-means clusters of keys, centroids as the index, entries
  striped by position and read one by one.

Importing this package registers all three.
"""

from sim.policies.baselines.infllm import InfLLM
from sim.policies.baselines.nocluster import NoCluster
from sim.policies.baselines.pqcache import PQCache

__all__ = ["InfLLM", "NoCluster", "PQCache"]
