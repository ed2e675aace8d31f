"""The ``ovos-memory`` command's machinery: commands, the persona chat, output, the demo and
the generated documentation tables."""
