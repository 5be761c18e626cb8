"""The pure, sans-IO core."""
