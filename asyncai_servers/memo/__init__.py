"""memo."""
