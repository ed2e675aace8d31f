"""What every memory of this package is built on: the plugin base (config, lifecycle), the
verbatim-window memory, ``session2history``, and exports with their conversion between backends."""
