"""What every backend is built on: the plugin base, the window base, background work, logging,
paths, token estimates, the host types and plugin loading."""
