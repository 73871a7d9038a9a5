"""xover: co-locate data-parallel training jobs on the same devices and let them take turns."""

__version__ = "0.1.0"
