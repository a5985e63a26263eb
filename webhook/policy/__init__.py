"""Policies as code: versioned ``TopologyPolicy`` documents — schema, validation, loading,
hot reload and matching. See docs/policies.md for the reference."""
