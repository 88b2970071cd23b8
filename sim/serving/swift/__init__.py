"""SwiftCache (seed 002): co-located models lending idle HBM over NVLink.

Pure policy modules (no clock, no simpy, no executor; the import-linter
contract "serving policies decide without a clock" covers this package):

* :mod:`.lsc` -- the master's layer stream cache and regular cache, sized by
  the paper's Eq. 1-5 (§3.2), and the maximum context that follows;
* :mod:`.meu` -- the minimum elastic unit of a master/worker pair from the
  LCM of their block sizes (Eq. 6-9, §3.4);
* :mod:`.elastic` -- the worker's elastic cache: what a resize moves in a
  block-major vs a layer-major layout (§3.4, Fig. 5-6), and Algorithm 1's
  scale-up on demand and periodic scale-down over a time window, driven by
  a clock value the caller passes in;
* :mod:`.coordinator` -- the messages that keep the master's replica of each
  worker's block table in sync (§3.5), as data;
* :mod:`.links` -- the bottleneck rate of a profile path and the reload time
  of a prefix over it (Fig. 1: PCIe vs NVLink), computed from the profile.

How the next step wires these into several engine instances on one flow
network: ``docs/swiftcache-design.md``.
"""
