"""asyncai_agent."""
