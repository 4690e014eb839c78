"""Comparisons of runs grouped by regime (or any config key), and their paper exports."""
