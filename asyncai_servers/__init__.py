"""Reference MCP servers that follow the asyncai watch contract (see docs/server-contract.md)."""
