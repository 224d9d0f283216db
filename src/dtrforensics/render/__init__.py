"""Rendering shared by the CLI, the TUI and the demo: analyses return data, this
package turns it into terminal text (rich) or strict JSON. It imports analyses'
result types, never a command or a widget."""
