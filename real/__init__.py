"""kvtier real backend: replays transfer plans on real devices (see issue 4)."""
