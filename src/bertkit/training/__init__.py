"""Small, pure training helpers shared by the recipes: optimizer groups + schedule, atomic checkpoints, distributed setup."""
