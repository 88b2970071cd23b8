"""Hardware profiles: what the machine has (see ``schema.py`` for the contract)."""

from hwprofiles.loader import PROFILE_DIR, ProfileError, list_profiles, load_profile
from hwprofiles.schema import (
    Assumption,
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

__all__ = [
    "Assumption",
    "PROFILE_DIR",
    "CpuSpec",
    "DramModule",
    "EfficiencySpec",
    "GpuSpec",
    "HardwareProfile",
    "LinkSpec",
    "ProfileError",
    "SoftwareSpec",
    "SsdGroup",
    "Topology",
    "list_profiles",
    "load_profile",
]
