"""Small, pure training helpers shared by the recipes: optimizer groups + schedule, precision, atomic checkpoints."""
