"""Preset data files, one JSON per model. Installed as the package ``costcalc.preset_data``."""
