"""Small, pure training helpers shared by the recipes: optimizer groups + schedules, atomic checkpoints,
distributed setup, ramps, the time budget, the metrics meter and graceful stops."""
